import torch

from alignment.models.loading import SMOLLM2, load_model_and_tokenizer, smollm2_dir


def test_smollm2_loads_offline_and_continues_sensibly():
    folder = smollm2_dir()
    assert (folder / "model.safetensors").is_file() and (folder / "tokenizer.json").is_file()
    model, tokenizer = load_model_and_tokenizer(SMOLLM2)
    assert model.config.hidden_size == 576 and model.config.num_hidden_layers == 30
    assert sum(p.numel() for p in model.parameters()) > 130e6
    chat = [{"role": "user", "content": "What is the capital of France?"}]
    inputs = tokenizer.apply_chat_template(chat, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=12, do_sample=False)
    reply = tokenizer.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
    assert "Paris" in reply
