"""Conversation-aware n-gram pools: one per conversation, kept across its turns, bounded in memory."""

from __future__ import annotations

from collections import OrderedDict

from core.lookahead.pool import NGramPool


class ConversationPools:
    """Keeps the n-gram pool of the most recently used conversations.

    A pool remembers the conversation's text and the model's own guesses across turns, so a
    follow-up ("now add type hints to that function") finds the earlier answer's n-grams.
    """

    def __init__(self, max_conversations: int = 8, max_keys_per_pool: int = 50_000) -> None:
        self.max_conversations = max_conversations
        self.max_keys_per_pool = max_keys_per_pool
        self._pools: OrderedDict[object, NGramPool] = OrderedDict()

    def pool_for(self, conversation: object, ngram: int, guesses: int) -> NGramPool:
        """The pool of ``conversation`` for n-grams of ``ngram`` tokens, ``guesses`` per key (a new one if those changed)."""
        pool = self._pools.get(conversation)
        if pool is None or pool.ngram != ngram or pool.per_key != guesses:
            pool = NGramPool(ngram, guesses, max_keys=self.max_keys_per_pool)
        self._pools[conversation] = pool
        self._pools.move_to_end(conversation)
        while len(self._pools) > self.max_conversations:
            self._pools.popitem(last=False)
        return pool

    def forget(self, conversation: object) -> None:
        """Drop a conversation's pool (deleted, or its history was edited)."""
        self._pools.pop(conversation, None)
