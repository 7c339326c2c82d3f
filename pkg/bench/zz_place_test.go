package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
)

func TestExplorePlace(t *testing.T) {
	if os.Getenv("PLACE") == "" {
		t.Skip()
	}
	r, err := Placement(context.Background(), PlacementOptions{Nodes: 1000, PerNode: 8, Queued: 100_000, Events: 100})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.MarshalIndent(r, "", " ")
	fmt.Printf("%s\n", b)
}
