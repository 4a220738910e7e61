"""A method written as a new folder and nothing else: a bias on the next-token logits per document, on only for the
prompts the framework routes to the document."""
from core.registry import MethodSpec, register
from tests.extra_methods.bias.config import BiasSettings
from tests.extra_methods.bias.serving import BiasServed
from tests.extra_methods.bias.training import BiasMethod

register(MethodSpec("bias", BiasServed, BiasMethod, BiasSettings, "bias.safetensors", per_document=True))
