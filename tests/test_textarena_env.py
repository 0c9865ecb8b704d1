"""TextArena's single-player games through `--env textarena:GAME-ID`: each game resets on a seed and plays fixed
moves with its real observations and rewards, invalid moves are scored by the game, seeds reproduce games without
touching the run's random state, games needing data this machine lacks are refused naming it, and GRPO steps on
the episodes (a scripted policy in the default suite, a tiny random model end to end under -m slow)."""

import json
import random
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from transformers import LlamaForCausalLM

from alignment.envs.loading import environment_maker, environment_tasks
from alignment.envs.textarena import TextArenaGame, _find_nltk, _missing
from alignment.grpo.config import GRPOConfig, validate
from alignment.grpo.episode_sampler import EpisodeSampler
from alignment.grpo.learner import GRPOLearner
from alignment.grpo_run import grpo_step, train_grpo
from alignment.rollout.interface import Rollout, SamplingConfig
from alignment.run.metrics_log import read_metrics_jsonl
from tests.conftest import tiny_config

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = SimpleNamespace(env_max_turns=None, n_train_prompts=4, n_eval_examples=2, seed=0)


def game(game_id: str, seed: int = 1) -> tuple[TextArenaGame, str]:
    env = environment_maker(f"textarena:{game_id}", SETTINGS)()
    return env, env.reset({"seed": seed})


def secret_number(env: TextArenaGame) -> int:
    return env.game.state.game_state["game_number"]


def test_guess_the_number_is_won_by_bisection_reading_the_game_s_hints():
    env, first = game("GuessTheNumber-v0", seed=4)
    assert "between 1 and 20" in first and env.max_turns == 10  # the game's own turn limit
    low, high, turns = 1, 20, 0
    while True:
        guess = (low + high) // 2
        step = env.step(f"I guess [{guess}]")
        turns += 1
        if step.done:
            break
        assert step.reward == 0.0 and step.observation in (
            "The target number is higher.",
            "The target number is lower.",
        )
        low, high = (guess + 1, high) if "higher" in step.observation else (low, guess - 1)
    assert step.reward == 1.0 and step.info == {"won": 1.0, "invalid_move": 0.0} and turns <= 5
    assert guess == secret_number(env)


def test_an_invalid_move_is_warned_then_scored_by_the_game():
    env, _ = game("GuessTheNumber-v0", seed=4)
    secret = secret_number(env)
    far = 20 if secret < 10 else 1
    assert not env.step(f"[{far}]").done
    warned = env.step("no brackets here")
    assert not warned.done and warned.observation.startswith("You attempted an invalid move")
    ended = env.step("still none")  # a second invalid move in a row ends the game at its score so far
    assert ended.done and ended.info == {"won": 0.0, "invalid_move": 1.0}
    assert ended.reward == pytest.approx(1 - abs(far - secret) / 19)  # GuessTheNumber's partial credit


def test_tower_of_hanoi_is_solved_in_seven_moves():
    env, first = game("TowerOfHanoi-v0")
    assert "A: [3, 2, 1]" in first and env.max_turns == 14
    moves = ["[A C]", "[A B]", "[C B]", "[A C]", "[B A]", "[B C]", "[A C]"]
    for move in moves[:-1]:
        step = env.step(move)
        assert not step.done and "Current Board" in step.observation
    assert "C: [1]" not in step.observation and "B: [2, 1]" not in step.observation  # the board after move 6
    last = env.step(moves[-1])
    assert last.done and last.reward == 1.0 and last.info["won"] == 1.0


def test_frozen_lake_rewards_the_goal_and_a_hole_ends_with_partial_credit():
    env, first = game("FrozenLake-v0", seed=1)
    rows = [line for line in first.splitlines() if line.startswith("|")]
    assert "P" in rows[0] and "G" in rows[3]
    assert rows[0].split("|")[3].strip() == "H"  # seed 1's lake: a hole right of the cell right of the start
    for move in ["[down]", "[right]", "[right]", "[right]", "[down]"]:
        step = env.step(move)
        assert not step.done and "Current Board" in step.observation
    goal = env.step("[down]")
    assert goal.done and goal.reward == 1.0
    env, _ = game("FrozenLake-v0", seed=1)
    env.step("[right]")
    hole = env.step("[right]")
    assert hole.done and 0.0 < hole.reward < 1.0 and hole.info["won"] == 0.0


def test_mastermind_answers_a_guess_with_pegs():
    env, first = game("Mastermind-v0")
    assert "4 digits long" in first and env.max_turns == 20
    step = env.step("[1 2 3 4]")
    assert not step.done and re.search(r"\d+ black peg\(s\), \d+ white peg\(s\)", step.observation)
    code = env.game.state.game_state["secret_code"]
    won = env.step("[" + " ".join(map(str, code)) + "]")
    assert won.done and won.reward == 1.0


def test_minesweeper_and_sudoku_show_their_boards_and_refuse_malformed_moves():
    env, first = game("Minesweeper-v0")
    assert "Board" in first and env.max_turns == 100
    revealed = env.step("[3 3]")  # a first move is always safe
    assert not revealed.done and "You revealed the cell at (3, 3)" in revealed.observation
    env, first = game("Sudoku-v0")
    assert "R9" in first
    refused = env.step("5")
    assert not refused.done and "invalid move" in refused.observation


def test_a_seed_is_one_game_and_the_run_s_random_state_is_untouched():
    random.seed(123)
    before = random.getstate()
    a, first_a = game("Minesweeper-v0", seed=7)
    b, first_b = game("Minesweeper-v0", seed=7)
    a.step("[2 2]")
    random.random()  # the run draws between the games' moves
    b.step("[2 2]")
    assert first_a == first_b and a.game.state.game_state["grid"] == b.game.state.game_state["grid"]
    c, _ = game("Minesweeper-v0", seed=8)
    c.step("[2 2]")
    assert c.game.state.game_state["grid"] != a.game.state.game_state["grid"]
    random.setstate(before)
    expected = random.random()
    random.setstate(before)
    game("GuessTheNumber-v0", seed=3)[0].step("[3]")
    assert random.random() == expected


def test_rows_are_seeds_distinct_between_training_and_validation_and_max_turns_can_be_set():
    train, validation = environment_tasks("textarena:GuessTheNumber-v0", SETTINGS)
    seeds = [r["seed"] for r in train.truths], [r["seed"] for r in validation.truths]
    assert len(seeds[0]) == 4 and len(seeds[1]) == 2 and not set(seeds[0]) & set(seeds[1])
    other, _ = environment_tasks("textarena:GuessTheNumber-v0", SimpleNamespace(**vars(SETTINGS) | {"seed": 1}))
    assert not {r["seed"] for r in other.truths} & set(seeds[0])
    short = SimpleNamespace(**vars(SETTINGS) | {"env_max_turns": 3})
    assert environment_maker("textarena:GuessTheNumber-v0", short)().max_turns == 3


@pytest.mark.skipif(_find_nltk("words"), reason="this machine has NLTK's word list: the word games load")
def test_a_game_needing_data_this_machine_lacks_is_refused_naming_it(capfd):
    with pytest.raises(ValueError, match=r"--env textarena:Hangman-v0: the game needs NLTK data 'words'"):
        environment_maker("textarena:Hangman-v0", SETTINGS)
    assert "nltk_data" not in capfd.readouterr().err  # NLTK's downloader never ran (it reports its failures there)


def test_nltk_s_missing_resource_message_names_the_resource():
    error = LookupError("\n****\n  Resource \x1b[93mwords\x1b[0m not found.\n  Please use the NLTK Downloader\n")
    assert _missing(error) == "NLTK data 'words'"


@pytest.mark.parametrize(
    "game_id, message",
    [
        ("GuessTheNumbr-v0", "has no game 'GuessTheNumbr-v0' \\(did you mean GuessTheNumber-v0"),
        ("TicTacToe-v0", "not a single-player game"),
    ],
)
def test_unknown_and_two_player_games_are_refused_in_one_line(game_id, message):
    with pytest.raises(ValueError, match=message):
        environment_maker(f"textarena:{game_id}", SETTINGS)


HINT = re.compile(r"\[(\d+)\]<\|im_end\|>\n<\|im_start\|>user\nThe target number is (\w+)")


class Bisector:
    """A rollout engine playing GuessTheNumber by bisection over the hints in its prompt; the episode at an odd
    position of a call guesses 1 below the middle, so a group's rewards differ."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def generate(self, prompts, n: int, sampling: SamplingConfig) -> list[Rollout]:
        out = []
        for i, ids in enumerate(prompts):
            text = self.tokenizer.decode(ids)
            low, high = 1, 20
            for guess, hint in re.findall(
                r"\[(\d+)\]<\|im_end\|>\n<\|im_start\|>user\nThe target number is (\w+)", text
            ):
                low, high = (int(guess) + 1, high) if hint == "higher" else (low, int(guess) - 1)
            reply = f"[{max(low, (low + high) // 2 - i % 2)}]"
            token_ids = self.tokenizer(reply, add_special_tokens=False)["input_ids"]
            out.append(Rollout(i, reply, token_ids, [-0.5] * len(token_ids), "stop"))
        return out

    def load_policy_weights(self, state_dict) -> None:
        pass


def textarena_config(tmp_path, **overrides) -> GRPOConfig:
    base = GRPOConfig(
        model="unused",
        env="textarena:GuessTheNumber-v0",
        env_max_turns=3,
        n_train_prompts=4,
        n_eval_examples=2,
        rollout_batch_size=4,
        group_size=2,
        train_batch_size=4,
        gradient_accumulation_steps=1,
        sampling_max_tokens=8,
        env_max_tokens=400,
        learning_rate=1e-3,
        grader_workers=1,
        output_dir=tmp_path,
    )
    return GRPOConfig(**vars(base) | overrides)


def test_a_grpo_step_trains_on_guess_the_number_episodes(tokenizer, tmp_path):
    config = textarena_config(tmp_path)
    validate(config)
    train, _ = environment_tasks(config.env, config)
    torch.manual_seed(0)
    policy = LlamaForCausalLM(tiny_config("llama", len(tokenizer), tokenizer.pad_token_id))
    engine = Bisector(tokenizer)
    sampler, learner = EpisodeSampler(config, engine, train, tokenizer), GRPOLearner(config, policy, tokenizer, train)
    drawn = sampler.draw(0)
    assert all("Guess The Number" in tokenizer.decode(e.prompt_ids) for e in drawn.rollouts)
    rewards = [e.reward for e in drawn.rollouts]
    assert set(rewards) - {1.0} and 1.0 in rewards  # some bisections won within 3 turns, others did not
    before = [p.detach().clone() for p in policy.parameters()]
    rows = grpo_step(sampler, learner, engine)
    assert learner.step == 1 and 0.0 < rows[0]["train_reward"] < 1.0 and 0.0 < rows[0]["train_won_rate"] < 1.0
    assert any(not torch.equal(a, b) for a, b in zip(before, policy.parameters()))


@pytest.mark.slow
def test_train_grpo_runs_a_textarena_game_on_a_tiny_random_model(tiny_model_dir, tmp_path):
    config = textarena_config(
        tmp_path / "run", model=str(tiny_model_dir), n_grpo_steps=1, eval_every=1, backend="hf", env_max_turns=2
    )
    rows = train_grpo(config)
    assert len(rows) == 1 and 0.0 <= rows[0]["train_reward"] <= 1.0 and 1 <= rows[0]["train_turns_mean"] <= 2
    logged = read_metrics_jsonl(config.output_dir / "metrics.jsonl")
    assert any(0.0 <= r.get("eval_reward", -1) <= 1.0 for r in logged)


@pytest.mark.slow
def test_the_textarena_benchmark_runs_tiny(tmp_path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "textarena_learning.py"), "--tiny", "--output-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((tmp_path / "bench.json").read_text())
    assert result["tiny"] and [r["seed"] for r in result["runs"]] == [0, 1]
    assert all(r["steps"] == 1 and 0.0 <= r["success_end"] <= 1.0 for r in result["runs"])
    assert result["summary"]["success_start"]["n"] == 2 and "success_start" in done.stdout


def test_a_turn_limit_set_by_the_run_is_the_game_s_and_the_game_scores_it():
    settings = SimpleNamespace(**vars(SETTINGS) | {"env_max_turns": 3})
    env = environment_maker("textarena:GuessTheNumber-v0", settings)()
    assert "within 3 turns" in env.reset({"seed": 4})
    secret = secret_number(env)
    guesses = [g for g in (1, 2, 3, 20, 19) if g != secret][:3]
    steps = [env.step(f"[{g}]") for g in guesses]
    assert [s.done for s in steps] == [False, False, True]  # the game ended itself at its (the run's) limit
    assert steps[-1].reward == pytest.approx(1 - abs(guesses[-1] - secret) / 19) and steps[-1].reward > 0


def test_the_textarena_benchmark_merges_seeds_run_side_by_side():
    import typer

    from bench.textarena_learning import merged

    def part(seeds: list[int], minutes: float = 20.0) -> dict:
        runs = [
            {"seed": s, "success_start": 0.0, "success_end": 0.1 * (s + 1), "reward_start": 0.05, "reward_end": 0.5}
            for s in seeds
        ]
        return {"game": "GuessTheNumber-v0", "max_turns": 6, "minutes_per_seed": minutes, "tiny": False} | {
            "parts": [{"seeds": seeds, "load_average": [1.0, 1.0, 1.0]}],
            "runs": runs,
        }

    result = merged([part([2, 3]), part([0, 1])])
    assert [r["seed"] for r in result["runs"]] == [0, 1, 2, 3] and len(result["parts"]) == 2
    success = result["summary"]["success_end"]
    assert success["n"] == 4 and success["mean"] == pytest.approx(0.25) and success["half_width_95"] > 0
    with pytest.raises(typer.BadParameter, match="differ in minutes_per_seed"):
        merged([part([0]), part([1], minutes=10.0)])
    with pytest.raises(typer.BadParameter, match="a seed is in more than one part"):
        merged([part([0, 1]), part([1])])
