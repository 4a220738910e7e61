"""OpenAI-compatible routes, so OpenAI clients work unchanged: /v1/completions, /v1/chat/completions (whole or
streamed, ending with `data: [DONE]`), /v1/models. `model` picks the knowledge version: `ckl` is the current
one, `ckl-vN` pins committed version N for that request (compare answers before and after a document);
`system_fingerprint` names the version that answered. Fields OpenAI defines and this server does not use are
ignored; values it cannot honour (n > 1, logprobs) are refused.

Laid out as vLLM's entrypoints/openai: `protocol.py` the request and response bodies, `serving.py` a request
to a generation and a generation to a response, `routes.py` the router."""
