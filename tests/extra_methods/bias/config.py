from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class BiasSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CKL_BIAS_", extra="forbid")

    optimizer: str = "sgd"
    learning_rate: float = Field(0.1, gt=0)
