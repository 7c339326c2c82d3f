# gpuq-agent for mock GPUs, built by deploy/build-images.sh: a static cgo
# build (go-nvml needs cgo) that cannot dlopen the real libnvidia-ml.so.1, so
# it always runs on go-nvml's mock. For real GPUs see docs/operations.md.
#
# Tasks run as `/bin/sh -c CMD`, so the image carries a static busybox
# (Debian's busybox-static) as /bin/sh and its applets (echo, sleep, cat, ...).
# Build context: a directory holding gpuq-agent and busybox..
FROM scratch
COPY busybox /bin/busybox
RUN ["/bin/busybox", "--install", "-s", "/bin"]
RUN mkdir -p /tmp /var/lib/gpuq/agent /var/lib/gpuq/checkpoints \
 && chmod 1777 /tmp \
 && chown -R 65532:65532 /var/lib/gpuq
COPY gpuq-agent /gpuq-agent
ENV PATH=/bin \
    HOME=/var/lib/gpuq \
    GPUQ_DATA_DIR=/var/lib/gpuq/agent \
    GPUQ_CHECKPOINT_DIR=/var/lib/gpuq/checkpoints
# /gpuq: `gpuq health URL`, the health check (no shell here).
COPY gpuq /gpuq
USER 65532:65532
ENTRYPOINT ["/gpuq-agent"]
