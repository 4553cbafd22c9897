"""The differences from verifiers 0.1.4 that are kept on purpose: where 0.1.4 crashes or is
plainly unintended. Each id is used by the parity tests that meet it and is listed, with its
reason, in docs/migrating.md (``test_every_exception_is_documented`` checks both)."""

from __future__ import annotations

EXCEPTIONS: dict[str, str] = {
    "no-assistant-message": (
        "ThinkParser's format reward of a completion without assistant messages: 0.1.4 divides by "
        "zero (ZeroDivisionError); ours scores 0.0"
    ),
    "string-completion-format": (
        "Format rewards of a string completion (completion API): 0.1.4 raises TypeError (it reads "
        "the string as a list of messages); ours judges the string as one message"
    ),
    "answer-after-env-message": (
        "Parser / ThinkParser parse_answer of a chat completion that ends with a user or tool "
        "message: 0.1.4 parsed that environment text as the model's answer; ours parses the last "
        "assistant message"
    ),
    "none-content-think": (
        "ThinkParser on an assistant message without content (tool calls only): 0.1.4 raises on "
        "None; ours reads it as empty text"
    ),
    "xml-extract-fn": (
        "XMLParser(extract_fn=...): 0.1.4 ignored extract_fn; ours applies it to parse_answer's result"
    ),
    "reward-error-metric": (
        "A reward function that raises or returns a non-number scores 0.0 in both; ours also reports "
        "the metric <name>_error = 1.0 for that rollout"
    ),
    "nonfinite-reward": "A reward function returning NaN or inf: 0.1.4 passes it on; ours scores 0.0 (<name>_error)",
    "rubric-construction": (
        "Rubric with as many weights as functions and distinct function names is required here "
        "(ConfigError at construction); 0.1.4 silently dropped unweighted functions from the reward "
        "and overwrote same-named metrics"
    ),
    "rubric-group-funcs": (
        "RubricGroup(funcs=...): 0.1.4 ignored them; ours adds them to the first rubric, as both do "
        "for RubricGroup.add_reward_func"
    ),
    "prompt-over-max-seq-len": (
        "process_env_results with a prompt longer than max_seq_len: 0.1.4 fails an assertion (it cut "
        "the prompt ids but not their mask); ours keeps the prompt's last max_seq_len tokens and an "
        "empty completion, counted as truncated"
    ),
    "trailing-env-text": (
        "process_env_results of a completion-API rollout whose text ends with environment text: "
        "0.1.4 fails an assertion ('Completion not fully consumed'); ours appends those tokens "
        "(mask as for other environment text)"
    ),
    "prompt-mask": (
        "ProcessedOutputs.prompt_mask: 0.1.4 returned zeros, and its trainer used prompt + completion "
        "masks as the attention mask, hiding the prompt; ours returns ones"
    ),
    "env-token-logprob": (
        "Log-probs of environment tokens that are trained (mask_env_responses=False): 0.1.4 wrote "
        "0.0 (probability 1); ours writes NaN (unknown), which the trainer recomputes. Where the loss "
        "mask is 0 ours writes 0.0 (0.1.4 kept the sampled log-prob under mask_truncated_completions)"
    ),
    "unknown-task-route": (
        "EnvGroup.get_env_for_task / rollout of a task no member handles: 0.1.4 fell back to the "
        "first environment (get_env_for_task) or raised KeyError (rollout); ours raises ConfigError "
        "naming the known tasks. Scoring such a rollout gives 0.0 in both"
    ),
    "group-error-metrics": (
        "EnvGroup's rubric keeps a member's <name>_error metrics; 0.1.4 kept only reward function names"
    ),
    "tool-schema-untyped": (
        "convert_func_to_oai_tool of a parameter whose type pydantic cannot describe, or of "
        "*args / **kwargs: 0.1.4 failed to build the tool or offered them as array / object "
        "parameters; ours gives that parameter an unconstrained schema and never offers *args / **kwargs"
    ),
    "completion-env-system-prompt": (
        "message_type='completion' with a system_prompt or few_shot, or a 'question' column: 0.1.4 "
        "raised ValueError or left the dataset without prompts; ours joins them into the prompt text"
    ),
}

# Differences from verifiers 0.1.8 / 0.1.10 / 0.1.12 kept on purpose (tests/parity/test_parity_01x.py);
# each id is listed with its reason in docs/migrating.md too.
EXCEPTIONS_01X: dict[str, str] = {
    "tokens-always": (
        "Trajectory steps here always carry the token ids and log-probs the server sent (the trainer "
        "needs them); 0.1.8-0.1.12 keep them only when the sampling args ask the server for them. "
        "Where both have them they are equal"
    ),
    "rubric-group-advantage": (
        "RubricGroup.score_group (every environment with monitor metrics has one): 0.1.8-0.1.12 leave "
        "each state's advantage as computed by the LAST member rubric alone (0.0 for the monitor "
        "rubric); ours is the summed reward minus the group's mean, as Rubric.score_group does. "
        "The trajectory steps' advantages, which training uses, are equal in both"
    ),
    "monitor-metrics-0.1.8": (
        "A 0.1.8-form module (@vf.stop, trajectory) gets the num_turns monitor metric here (weight "
        "0, so rewards are equal); 0.1.8 had no monitor rubric yet, 0.1.10+ add it: the later "
        "release is followed"
    ),
    "judge-question-objects": (
        "JudgeRubric's {question} in 0.1.12: its prompt messages are pydantic objects, which the "
        "judge's dict check skips, so 0.1.12 sends an empty question; ours sends the prompt's last "
        "message (0.1.4-0.1.10's behaviour)"
    ),
}
