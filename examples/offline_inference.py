"""The seed's offline example, run on the bundled pair (no model hub needed).

    python examples/offline_inference.py

With access to the hub, put "Qwen/Qwen3-8B" and "Qwen/Qwen3-0.6B" in place of
the bundled names: nothing else changes.
"""

from specserve import LLM, SamplingParams

prompts = ["The future of AI is", "def fibonacci(n):"]
sampling_params = SamplingParams(temperature=0.8, top_p=0.95)

llm = LLM(
    model="specserve/demo-target",
    tensor_parallel_size=1,
    speculative_config={
        "model": "specserve/demo-draft",
        "num_speculative_tokens": 5,
        "method": "draft_model",
    },
)

outputs = llm.generate(prompts, sampling_params)

for output in outputs:
    prompt = output.prompt
    generated_text = output.outputs[0].text
    print(f"Prompt: {prompt!r}, Generated text: {generated_text!r}")
print(llm.speculation_stats())
