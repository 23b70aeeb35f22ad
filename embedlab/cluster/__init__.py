"""A deployment: its processes, where they run, what can happen to them; the stack contract.

    spec        DeploymentSpec, WorkerSpec: what to launch, frozen and checked
    deployment  Deployment: a stack's processes from a spec; lifecycle and addresses
    launcher    starting and relaunching processes, waiting until each is ready; it builds
    processes   Processes: a run's processes by role, their lock, its live weights
    outages     a cluster's faults: kill, partition, heal, kill_host, restart_etcd
    steering    drain, resume, live weights, each the stack's own way
    supervisor  the restart policy       events     Event, EventLog; LaunchReport
                (outages, steering and the supervisor take the launcher, never the deployment)
    placement   each process's run folder, GPU and vLLM settings, decided before it starts
    stack       the stack contract: BaseStack, the capabilities (Drains, LiveWeights, ...), capable
    stack_context  what a run gives a stack: StackContext (carrying the state prepare() returns),
                ProcessSpec, Join, and how any stack starts embedlab's worker
    stack_check what a stack class must be to join; stack_registry: STACKS by name
    worker_server  what runs behind a frontend, one replica per worker: the WorkerServer
                contract, WORKER_SERVERS by name, and what the cluster and the scenarios ask of them
    process, watchdog, hosts, ports, etcd: managed processes in their own groups, the
                harness's own death, network namespaces, port reservations, etcd

May import `evidence` (metrics, targets, clients), `engines` (what an engine asks of its
worker: `engine_traits`, never its name), `progress` and the base modules.
Never a concrete stack or foreign worker server: the registries name them by
"module:Class" strings, imported on first use. Nothing is imported here.
"""
