//! Embedding `holdfast::seglog` in another program: durable append from many
//! tasks, a named consumer that reads and commits, and what the log reports.
//!
//! ```text
//! cargo run --release --example seglog -- [DIR]
//! ```
//!
//! Run it twice with the same DIR: the second run continues the sequence
//! numbers and the consumer resumes where the first run committed.

use std::time::Instant;

use holdfast::seglog::{Batch, FsyncPolicy, Log, LogOptions, StartAt, WhenFull};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = match std::env::args().nth(1) {
        Some(d) => std::path::PathBuf::from(d),
        None => std::env::temp_dir().join("holdfast-seglog-example"),
    };
    let opts = LogOptions {
        segment_bytes: 8 << 20,
        max_bytes: 256 << 20,
        fsync: FsyncPolicy::Always,
        when_full: WhenFull::Block,
        ..LogOptions::default()
    };
    let log = tokio::task::spawn_blocking({
        let dir = dir.clone();
        move || Log::open(dir, opts)
    })
    .await??;
    println!(
        "log at {} holds sequence numbers {}..{}",
        dir.display(),
        log.stats().first_seq,
        log.next_seq()
    );

    // Eight producers, each appending 1,000 batches of 10 events: every
    // `append` returns only once its events are fdatasynced, and concurrent
    // appends share one write and one sync.
    let started = Instant::now();
    let mut producers = Vec::new();
    for p in 0..8 {
        let log = log.clone();
        producers.push(tokio::spawn(async move {
            for i in 0..1000 {
                let mut batch = Batch::new();
                for e in 0..10 {
                    batch.push(format!("producer {p} batch {i} event {e}").as_bytes());
                }
                log.append(batch).await?;
            }
            Ok::<_, holdfast::seglog::LogError>(())
        }));
    }
    for p in producers {
        p.await??;
    }
    let s = log.stats();
    println!(
        "appended 80,000 durable events in {:.2?}: {} frames, {} fdatasyncs (group commit)",
        started.elapsed(),
        s.counters.frames_written,
        s.counters.fsyncs
    );

    // A consumer reads from its own cursor and commits what it has finished.
    let mut consumer = log.consumer("example", StartAt::Oldest)?;
    let mut read = 0u64;
    loop {
        let events = consumer.read(10_000, 4 << 20)?;
        let Some(last) = events.last() else { break };
        read += events.len() as u64;
        consumer.commit(last.seq + 1)?;
    }
    println!(
        "consumer 'example' read {read} events and committed up to {}",
        consumer.committed()
    );

    let s = log.stats();
    println!(
        "log: {} segments, {} bytes, sequence {}..{}; consumer lag {} events",
        s.segments, s.bytes, s.first_seq, s.next_seq, s.consumers[0].lag_events
    );
    log.close().await?;
    Ok(())
}
