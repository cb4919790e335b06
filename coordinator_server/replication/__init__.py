"""The synchronous core of partition replication, as Kafka's Partition / ReplicaManager / LeaderEpochFileCache.

No asyncio, no sockets, no clock: time comes in as ``now_ms``. The shell (follower fetcher tasks, the Fetch
and OffsetsForLeaderEpoch handlers, ZooKeeper writes) calls these and carries out what they decide.
"""
