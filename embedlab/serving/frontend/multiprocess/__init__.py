"""Several routing processes on one port (`embedlab frontend --processes N`).

owner    the process `embedlab frontend` starts: owns the table, starts the replicas
replica  every other routing process: routes from a replica of the table
frames   length-prefixed JSON frames: the routing processes' control plane
"""
