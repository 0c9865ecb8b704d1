"""What runs train and validate on.

math_datasets.py    MATH and GSM8K as shipped: short names, jsonl files, `<split>.jsonl` folders, repo
                    folders, hub ids, $ALIGNMENT_DATA_MIRROR; answers from `answer` or the last `\\boxed{}`
splits.py           which split trains and which validates, held-out slices, the overlap check
task.py             Task: questions, ground truths, a prompt template and a reward function
keywords.py         the keyword-inclusion task and its reward (`keyword_inclusion_reward_fn`)
keyword_dataset.py  keyword datasets with model answers (scripts/build_keyword_dataset.py)
sft_examples.py     SFT examples: prompt/response/ground_truth jsonl, GSM8K r1_zero reasoning traces
packed_sft.py       packed instruction-tuning blocks (CS336 A5 supplement)
"""
