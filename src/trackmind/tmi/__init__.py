"""The real game: Trackmania Nations Forever through TMInterface 1.x, behind GameInstance.

Modules: state (SimStateData -> car state in trackmind's frame), progress (position ->
progress along the reference line), client (TMInterface callbacks -> action steps),
connection (reaching a server, real or stand-in), game (TMInterfaceGame), observation and
terms (lost races), capture (frames), launcher (restarting a hung game), standin (the
simulator behind the same TMInterface calls), realtime (rtgym-style elastic stepping over
any GameInstance), reference_line and record (building real maps), config and build (from
the `env` config group).
"""
