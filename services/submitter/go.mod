module github.com/gpuq/gpuq/services/submitter

go 1.26

require github.com/gpuq/gpuq/pkg v0.0.0

replace github.com/gpuq/gpuq/pkg => ../../pkg
