// Command fastgen writes fastdecode_gen.go from types.go, in the current
// directory (pkg/events): `go generate ./pkg/events`.
package main

import (
	"fmt"
	"os"

	"github.com/gpuq/gpuq/pkg/events/internal/fastgen"
)

func main() {
	const in, out = "types.go", "fastdecode_gen.go"
	src, err := os.ReadFile(in)
	if err == nil {
		src, err = fastgen.Generate(in, src)
	}
	if err == nil {
		err = os.WriteFile(out, src, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fastgen:", err)
		os.Exit(1)
	}
}
