/*!
holdfast: a telemetry agent for edge devices.

```text
 sources                         the log                           sinks
 file tail  ─┐                ┌─────────────────┐       ┌─ cursor ─ batch → send → per-event results
 OTLP/HTTP  ─┼─ append ──────▶│ segments on disk │──read─┼─ cursor ─ batch → send → ...
             ┘ (group commit) └─────────────────┘       └─ quarantine
```

Components:

* [`seglog`] — the durable, bounded, append-only segment log every record
  passes through: group-committed appends, one cursor per consumer, eviction
  by size and age, recovery from torn writes and damage. Also usable on its
  own as a library.
*/

pub mod event;
pub mod seglog;
