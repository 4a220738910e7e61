"""The routed method: a low-rank delta per document, used only for prompts that name its subject or rare words."""
from core.registry import MethodSpec, register
from methods.routed import routing
from methods.routed.config import RoutedSettings
from methods.routed.serving import RoutedServed
from methods.routed.training import RoutedMethod

register(MethodSpec("routed", RoutedServed, RoutedMethod, RoutedSettings, "routed_lora.safetensors", removable=True,
                    routed=True,
                    refusal=lambda text, probes, config: routing.refusal(text, probes, config.threshold),
                    unreachable=lambda text, probes, config: routing.unreachable(text, probes, config.threshold)))
