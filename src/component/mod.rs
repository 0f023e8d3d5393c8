/*!
The component contract: what every source and sink is to the rest of
holdfast, and what it runs with. It sits above the shared kits, the
metrics and the checking machinery, and below the components
(`src/sources/`, `src/sinks/`), which implement it; the lists of kinds
(`src/sources/mod.rs`, `src/sinks/mod.rs`, written by `kinds.rs`'s macro),
the config and the daemon reach components only through it.

* `Source` and `Sink` (`source.rs`, `sink.rs`): the traits a
  component's options implement: check its table, describe itself, declare
  its metrics (the series created at 0 when it starts), its processing
  chain, its machine checks, and start;
* `SourceEnv`, `SinkEnv`: what a check may need besides its own table;
* [`ComponentContext`] and [`Run`] (`context.rs`): what a started
  component runs with, and the task it is.
*/

mod context;
mod kinds;
mod sink;
mod source;

pub use context::{ComponentContext, Run};
pub(crate) use kinds::components;
pub(crate) use sink::{Sink, SinkEnv};
pub use source::Processing;
pub(crate) use source::{Source, SourceEnv};
