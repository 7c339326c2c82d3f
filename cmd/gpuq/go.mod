module github.com/gpuq/gpuq/cmd/gpuq

go 1.26

require (
	github.com/gpuq/gpuq/pkg v0.0.0
	github.com/gpuq/gpuq/services/advisor v0.0.0
	github.com/gpuq/gpuq/services/gpuagent v0.0.0
	github.com/gpuq/gpuq/services/scheduler v0.0.0
	github.com/gpuq/gpuq/services/submitter v0.0.0
)

replace (
	github.com/gpuq/gpuq/pkg => ../../pkg
	github.com/gpuq/gpuq/services/advisor => ../../services/advisor
	github.com/gpuq/gpuq/services/gpuagent => ../../services/gpuagent
	github.com/gpuq/gpuq/services/scheduler => ../../services/scheduler
	github.com/gpuq/gpuq/services/submitter => ../../services/submitter
)
