"""Model services: judges, summarisers and teachers behind one `ChatModel` interface.

* `ChatModel` (chat_model.py): `complete(messages_list, max_tokens, temperature, stop, top_p,
  seed) -> list[str]`; `ChatServiceError` for every failure.
* `OpenAIChatClient` (http_client.py): any OpenAI-compatible endpoint, with retries, a deadline,
  concurrency and a disk cache (`ChatCache`, reply_cache.py; `CachedChatModel` wraps any model).
* `LocalChatModel` (local.py): a ragjax decoder in this process, batched on the `Sampler`.
* `python -m ragjax.services.chat_server` (chat_server.py, decode_batcher.py): an OpenAI-compatible
  server on a `LocalChatModel` that batches concurrent requests into one decode.
* Templates (templates.py): the ReZero, R3-RAG and UR² judge / summariser / teacher prompts
  with their parsers; `TemplateJudge` (judge.py) runs one over a `ChatModel`.
* `SummarisingRetriever` (proxy.py): UR²'s LLM-summarised retrieval, a `Retriever`, servable
  as a Search-R1 `/retrieve` server with `python -m ragjax.services.proxy`.
"""

from ragjax.services.reply_cache import CachedChatModel, ChatCache, request_key, request_record
from ragjax.services.chat_model import ChatModel, ChatServiceError, Completion
from ragjax.services.http_client import OpenAIChatClient
from ragjax.services.judge import TemplateJudge
from ragjax.services.templates import TEMPLATES, Parsed, Template, get_template

__all__ = ["CachedChatModel", "ChatCache", "ChatModel", "ChatServiceError", "Completion",
           "OpenAIChatClient", "Parsed", "TEMPLATES", "Template", "TemplateJudge", "get_template",
           "request_key", "request_record"]
