"""torch.distributed helpers; torch is imported only when they are used."""


def should_checkpoint_all(task, group=None):
    """Whether any rank's task should checkpoint: the flag of every rank,
    all-reduced (MAX) across the torch.distributed group, so that all ranks
    checkpoint at the same step. Without an initialized process group it is
    this rank's flag. Call it at the same point of every rank's step."""
    flag = bool(task is not None and task.should_checkpoint())
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return flag
    device = torch.device("cpu")
    if dist.get_backend(group) == "nccl":
        device = torch.device("cuda", torch.cuda.current_device())
    t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return bool(t.item())
