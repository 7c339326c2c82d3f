// Package svcmain holds what the four service binaries (gpuq-submitter,
// gpuq-scheduler, gpuq-advisor, gpuq-agent) share: a cobra command line (the
// CLI's own flag library) whose flags fall back to
// GPUQ_* environment variables, the flags every service takes, and the
// start-up connection to NATS and the audit log.
//
// Bad flags or environment values end the process with status 2 and name
// the field. The package does not depend on a logging library; callers pass
// a callback for the messages it has to say while waiting.
package svcmain
