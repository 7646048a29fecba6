"""The wire vocabulary, defined once (DESIGN §1): error codes, `TopicPartition`, the offset, epoch and
leader sentinels, and the request and response shapes of the HTTP+msgpack API with their codec.

A leaf package: every layer may import it, and it imports nothing of ours (only the standard
library and msgpack), so the client depends on no core and nothing here is written twice.
"""
