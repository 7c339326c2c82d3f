package main

// docs/cli.md is generated from the commands (clidoc_test.go); `make docs`
// runs the same.
//go:generate go test -count=1 -run ^TestCLIDoc$ -update-docs .
