// Package training runs the PyTorch examples (examples/pytorch) as gpuq
// tasks on a real `bin/gpuq dev`, preempts them with a CRITICAL task and
// checks that they checkpoint through the Python client, resume, and end
// with the weights of an uninterrupted run. Its tests carry the build tag
// training: `make test-training` (docs/training.md). They need Debian's
// python3-torch (/usr/bin/python3, or $GPUQ_TRAINING_PYTHON) and skip,
// saying so, without it.
package training
