"""Chat templates as models ship them, for the tool-template tests.

Stands in for a model's own chat template: ``TOOLS_TEMPLATE`` renders ``tools`` itself (as many newer
models' templates do), so verifiers' tool fallback (verifiers/tokenization/chat_template.py) leaves it
alone. Used by the default tier's unit tests of the fallback (tests/tokenization/test_tool_template.py)
and of vf-vllm's choice of template (tests/inference/server/test_main.py)."""

from __future__ import annotations

# A template that does render tools (as many newer models' do): left alone.
TOOLS_TEMPLATE = (
    "{%- if tools %}{{ 'TOOLS ' + (tools | tojson) + '\n' }}{% endif -%}"
    "{%- for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{% endfor -%}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif -%}"
)
