# NATS server with JetStream, built by deploy/build-images.sh from the Go
# module github.com/nats-io/nats-server/v2 (CGO_ENABLED=0, static).
# Build context: a directory holding nats-server and an empty data/.
FROM scratch
COPY nats-server /nats-server
# The named volume mounted on /data starts with this directory's owner.
COPY --chown=65532:65532 data/ /data/
# /gpuq: `gpuq health URL`, the health check (no shell here).
COPY gpuq /gpuq
USER 65532:65532
EXPOSE 4222 8222
# Client port 4222, monitoring 8222 (/healthz, /jsz), JetStream store in
# /data/jetstream (the server adds jetstream/ to --store_dir). For other
# settings (sync_interval, limits, TLS) mount a config file and run with -c.
ENTRYPOINT ["/nats-server"]
CMD ["--jetstream", "--store_dir", "/data", "--http_port", "8222", "--server_name", "gpuq-nats"]
