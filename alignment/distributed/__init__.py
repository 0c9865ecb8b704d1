"""One policy over several processes with PyTorch's FSDP2 (torchrun, or the Ray learner group).

sharding.py             the process group, sharding at model build, each rank's microbatch turns (the
                        lockstep every rank keeps), gathered weights for sampling, the gradient norm
sharded_checkpoint.py   the shards in torch.distributed.checkpoint format, read without running code,
                        re-sharded on load
"""
