"""What a checkpoint is: the config.json values that shape vLLM's KV cache (`geometry`) and the weights' bytes,
from a checkpoint directory, the local Hugging Face cache (`hub_cache`) or the hub's headers (`hub`, kept by
`hub_store`). Changes when the hub or a model changes; imports nothing of planning's."""
