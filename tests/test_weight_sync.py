"""Weight sync without a cluster: which transports are refused where, that the learner's weights (and exactly the
tokens it was sent) reach the generator bit for bit, and that the colocated worker generates from a copy of its own
that each sync updates. The Ray transports run in test_ray_strategies."""

import pytest
import torch

from alignment.ray.actors import ColocatedWorker, Generator, Learner, token_checksum
from alignment.ray.config import RayGRPOConfig
from alignment.ray.weight_sync import Placement, check_transport
from tests.test_grpo_loop import TASK, hash_reward

CPU = [Placement("Learner", "cpu"), Placement("Generator", "cpu")]


@pytest.mark.parametrize("transport", ["object_store", "gloo"])
def test_cpu_transports_are_accepted_on_cpus(transport):
    check_transport(transport, CPU)


@pytest.mark.parametrize(
    "placements,message",
    [
        (CPU, "--weight-sync nccl needs every actor on a GPU, but Learner, Generator run on the CPU"),
        ([Placement("Learner", "cuda", "node/0"), Placement("Generator", "cpu")], "but Generator run on the CPU"),
        ([Placement("Learner", "cuda", "node/0"), Placement("Generator", "cuda", "node/0")], "needs one GPU per actor"),
    ],
)
def test_nccl_is_refused_unless_each_actor_has_its_own_gpu(placements, message):
    with pytest.raises(ValueError, match=message):
        check_transport("nccl", placements)


def test_unknown_transport_names_the_flag():
    with pytest.raises(ValueError, match="--weight-sync 'tcp' is not one of object_store, nccl, gloo"):
        check_transport("tcp", CPU)


@pytest.fixture
def keep_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)  # the actors set their own thread count


def small_config(tiny_model_dir, **overrides) -> RayGRPOConfig:
    """Two groups of two short rollouts, two microbatches, a large rate so that one update moves every weight."""
    return RayGRPOConfig(
        model=str(tiny_model_dir),
        rollout_batch_size=4,
        group_size=2,
        train_batch_size=4,
        gradient_accumulation_steps=2,
        sampling_max_tokens=6,
        sampling_min_tokens=2,
        learning_rate=1e-2,
        prompt="question_only",
        kl_reference=False,
        kl_prev=False,
        **overrides,
    )


def test_learner_weights_reach_the_generator_bit_for_bit(tiny_model_dir, keep_threads):
    config = small_config(tiny_model_dir, backend="hf")
    learner, generator = Learner(config, TASK, "cpu", 1), Generator(config, TASK, TASK, "cpu", 1)
    assert learner.digest() == generator.digest()  # both loaded the same checkpoint

    generated, texts = generator.generate([0, 1], step=0)
    assert texts == [(r.prompt_index, r.text) for r in generated.rollouts] and [i for i, _ in texts] == [0, 0, 1, 1]
    scores = [hash_reward(r.text, "") for r in generated.rollouts]
    learned = learner.learn([0, 1], generated.rollouts, scores)
    assert learned.version == 1 and len(learned.rows) == 1
    assert learned.checksum == token_checksum(r.token_ids for r in generated.rollouts)
    tampered = [generated.rollouts[1], generated.rollouts[0]] + generated.rollouts[2:]
    assert learned.checksum != token_checksum(r.token_ids for r in tampered)  # order matters

    assert learner.digest() != generator.digest()  # the update moved the policy
    generator.load_weights(learner.weights(on_cpu=True), learned.version)
    assert learner.digest() == generator.digest() and generator.weights_version == 1


def test_a_lora_learner_sends_only_its_adapters_and_the_generator_matches_it(tiny_model_dir, keep_threads):
    config = RayGRPOConfig(
        model=str(tiny_model_dir),
        rollout_batch_size=4,
        group_size=2,
        train_batch_size=4,
        gradient_accumulation_steps=2,
        sampling_max_tokens=6,
        sampling_min_tokens=2,
        learning_rate=1e-2,
        prompt="question_only",
        backend="hf",
        kl_reference=False,
        kl_prev=False,
        lora_rank=4,
    )
    learner, generator = Learner(config, TASK, "cpu", 1), Generator(config, TASK, TASK, "cpu", 1)
    generated, _ = generator.generate([0, 1], step=0)
    learner.learn([0, 1], generated.rollouts, [hash_reward(r.text, "") for r in generated.rollouts])
    sent = learner.weights(on_cpu=True)
    assert sent and all(".lora_A." in k or ".lora_B." in k for k in sent)  # no base weight travels
    full = sum(t.numel() for t in learner.learner.policy.state_dict().values())
    assert sum(t.numel() for t in sent.values()) < full / 10
    generator.load_weights(sent, 1)
    assert learner.digest() == generator.digest()  # the same frozen base, now the same adapters


@pytest.mark.parametrize(
    "backend,lora_rank", [("hf", 0), pytest.param("transformer_lm", 0, marks=pytest.mark.slow), ("hf", 4)]
)  # our own LM's copy under -m slow: its weight loading is tested by default in tests/test_transformer_lm_policy.py
def test_the_colocated_worker_samples_a_copy_of_its_own_that_each_sync_updates(
    tiny_model_dir, keep_threads, backend, lora_rank
):
    """UW CSE599-O A3 v2 §3.1.1: the colocated worker holds "a second copy of the model just for generation"; the
    sync copies the learner's weights into it (under LoRA the adapters; the frozen base is shared), and takes
    measurable time."""
    config = small_config(tiny_model_dir, backend=backend, lora_rank=lora_rank)
    worker = ColocatedWorker(config, TASK, TASK, "cpu", 1)
    generator, policy = worker.model, worker.learner.policy
    assert generator is not None and worker.engine.model is generator and generator is not policy

    def shared() -> set[bool]:
        """For each weight that trains, whether the copy holds it in the learner's storage."""
        own = {name: t.data_ptr() for name, t in generator.named_parameters()}
        return {own[name] == t.data_ptr() for name, t in policy.named_parameters() if t.requires_grad}

    assert shared() == {False} and worker.generator_digest() == worker.digest()
    generated, _ = worker.generate([0, 1], step=0)
    worker.learn([0, 1], generated.rollouts, [hash_reward(r.text, "") for r in generated.rollouts])
    assert worker.generator_digest() != worker.digest()  # the update moved the learner's copy only
    assert worker.sync_engine() > 0
    assert worker.generator_digest() == worker.digest() and worker.weights_version == 1 and shared() == {False}
