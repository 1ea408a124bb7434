"""collector=ray: the rollout fleet of seed 002 on Ray, beside the local collector processes.

RayCollectorPool (learner side) starts or joins Ray and creates a RolloutManager actor,
which creates and supervises RolloutWorkerWrapper actors; each wrapper owns a RolloutWorker
that races several EnvWorkers (game instances) with one batched inference and ships every
race as a SampleFragment through its sender thread to the ReplayBufferInterface actor. The
learner's Receiver thread pulls them from there, drops data from policies older than
`max_staleness` versions, and hands the rest to the ReplayDataModule as queue messages.
EpisodeStatistics (an actor) keeps per-map race times and finish rates for MLflow.

Modules: config (keys, address checks), connect (ray.init), fragment (SampleFragment,
staleness), worker (EnvWorker, RolloutWorker; no Ray), wrapper, manager, interface,
statistics (actors), receiver, pool.
"""
