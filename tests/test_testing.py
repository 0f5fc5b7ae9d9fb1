"""The tiny-model builder that every model test relies on."""

from transformers import AutoModelForCausalLM, AutoTokenizer


def test_tiny_model_loads_and_generates(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    text = tok.apply_chat_template([{"role": "user", "content": "What is 3 plus 4?"}], tokenize=False,
                                   add_generation_prompt=True)
    assert text.endswith("<|im_start|>assistant\n")
    ids = tok(text, return_tensors="pt").input_ids
    assert tok.decode(ids[0]) == text  # byte-level BPE round-trips
    out = model.generate(ids, max_new_tokens=5, do_sample=True)
    assert out.shape[1] <= ids.shape[1] + 5
    assert tok.eos_token == "<|im_end|>" and tok.pad_token_id != tok.eos_token_id
