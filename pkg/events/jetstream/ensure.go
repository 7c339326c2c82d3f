package jetstream

import (
	"context"
	"errors"
	"reflect"

	js "github.com/nats-io/nats.go/jetstream"
)

// ensuring is the js.JetStream every service gets from Log.JetStream: its
// CreateOrUpdate methods look first and change nothing that already has
// the configuration asked for. So a service whose NATS user may only
// create its streams and buckets, not update them (auth.Roles: an update
// can shorten limits, which is the admin's to do), starts on a server
// where they exist; a missing one is created, a different one updated
// (refused by the server unless the user may).
type ensuring struct{ js.JetStream }

var _ js.JetStream = ensuring{}

func (e ensuring) CreateOrUpdateStream(ctx context.Context, cfg js.StreamConfig) (js.Stream, error) {
	s, err := e.JetStream.Stream(ctx, cfg.Name)
	switch {
	case errors.Is(err, js.ErrStreamNotFound):
		return e.JetStream.CreateStream(ctx, cfg)
	case err != nil:
		return nil, err
	case covers(s.CachedInfo().Config, cfg):
		return s, nil
	}
	return e.JetStream.UpdateStream(ctx, cfg)
}

func (e ensuring) CreateOrUpdateKeyValue(ctx context.Context, cfg js.KeyValueConfig) (js.KeyValue, error) {
	s, err := e.JetStream.Stream(ctx, "KV_"+cfg.Bucket)
	switch {
	case errors.Is(err, js.ErrStreamNotFound):
		return e.JetStream.CreateKeyValue(ctx, cfg)
	case err != nil:
		return nil, err
	}
	have := s.CachedInfo().Config
	history := int64(max(cfg.History, 1))
	if have.MaxAge == cfg.TTL && have.MaxMsgsPerSubject == history && have.Replicas == max(cfg.Replicas, 1) &&
		(cfg.Description == "" || have.Description == cfg.Description) {
		return e.JetStream.KeyValue(ctx, cfg.Bucket)
	}
	return e.JetStream.CreateOrUpdateKeyValue(ctx, cfg)
}

func (e ensuring) CreateOrUpdateObjectStore(ctx context.Context, cfg js.ObjectStoreConfig) (js.ObjectStore, error) {
	s, err := e.JetStream.Stream(ctx, "OBJ_"+cfg.Bucket)
	switch {
	case errors.Is(err, js.ErrStreamNotFound):
		return e.JetStream.CreateObjectStore(ctx, cfg)
	case err != nil:
		return nil, err
	}
	have := s.CachedInfo().Config
	if have.Replicas == max(cfg.Replicas, 1) && have.Storage == cfg.Storage &&
		(cfg.Description == "" || have.Description == cfg.Description) {
		return e.JetStream.ObjectStore(ctx, cfg.Bucket)
	}
	return e.JetStream.CreateOrUpdateObjectStore(ctx, cfg)
}

// covers is whether have already has every field that want sets (a zero
// field of want means "the server's default" and is not compared).
func covers(have, want js.StreamConfig) bool {
	h, w := reflect.ValueOf(have), reflect.ValueOf(want)
	for i := 0; i < w.NumField(); i++ {
		f := w.Field(i)
		if f.IsZero() {
			continue
		}
		if !reflect.DeepEqual(f.Interface(), h.Field(i).Interface()) {
			return false
		}
	}
	return true
}
