"""GRPO beyond the handouts' primitives: the parts the loop in alignment/grpo_run.py composes.

config.py         GRPOConfig: every setting of a run (help and choices beside each field) and its checks
objective.py      Objective: reward shaping, advantage estimator, loss, clip range, rollout correction and
                  aggregation, resolved once from the settings; the learner calls nothing else of them
sampler.py        GRPOSampler: draws questions, generates group_size rollouts each, grades them (DAPO's
                  dynamic sampling); the sampling settings of a step
learner.py        GRPOLearner: graded rollouts -> training batch -> old / reference log-probs -> optimizer
                  steps; used by the single-process loop, the Ray learner and the colocated worker alike
batch.py          RolloutBatch: rollouts as right-padded training tensors
scoring.py        the batch's log-probs without gradient, and a microbatch's with gradient only where the
                  backward matters (--skip-zero-advantage)
shared_prompt.py  response log-probs with each distinct prompt run through the model once
episode_sampler.py  EpisodeSampler: GRPOSampler's draw and evaluate over an environment's episodes (--env)
environments.py   the environments --env selects, each with its constructor and its tasks
synthetic.py      a train phase on random rows and weights of a model's shape (GPU benches and checks)
colocated.py      UW's colocated on-policy GRPO under its starter's names (Generator, Learner, ColocatedWorker,
                  run_training) over the sampler's engine and the learner
"""
