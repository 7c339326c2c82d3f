module github.com/gpuq/gpuq/tests/training

go 1.26.0
