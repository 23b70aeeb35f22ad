"""The concrete stacks: how each one starts its frontend and workers, and what it can do.

    embedded  embedlab's own frontend and workers     dynamo   Dynamo's frontend, etcd; Dynamo's vLLM worker
    routers   vllm-router, sglang-router, litellm     smg      SGLang's model gateway
    haproxy, nginx  the load balancers (their shared part: balancers.Balancer)
    standalone  the workers a router or balancer is given by URL (StandaloneWorkers)
    foreign_servers  the worker servers stacks launch by argv: vllm serve, Infinity, TEI

Each stack derives from `BaseStack` alone (the contract is `embedlab.cluster.stack`) and is
composed of parts: the workers it fronts (`standalone.StandaloneWorkers`) and its frontend's
family (`routers.RustRouter`, `balancers.Balancer`). Each is named in the registry
(`embedlab.cluster.stack_registry`), which imports it only when it is asked for; each
foreign server is a `WorkerServer` (`embedlab.cluster.worker_server`, its registry too).
A stack may import the cluster, the evidence and the base modules; nothing but the
registry's "module:Class" strings and the CLI reaches a stack, and no stack knows a
scenario. Nothing is imported here.
"""
