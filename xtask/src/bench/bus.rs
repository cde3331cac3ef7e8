//! `bus_*`: events delivered per second to 1, 8 and 64 subscribers, against raw tokio broadcast.

use std::sync::Arc;
use std::time::Instant;

use rho_runtime::{Bus, BusItem, EventKind};
use tokio::sync::broadcast;
use tokio_stream::StreamExt;

use super::{Ctx, Figure};

const CAPACITY: usize = 1 << 16;

pub(super) async fn rho_round(subscribers: usize, events: u64) -> f64 {
    let bus = Bus::new(CAPACITY);
    let tasks: Vec<_> = (0..subscribers)
        .map(|_| {
            let mut sub = bus.subscribe();
            tokio::spawn(async move {
                let mut got = 0u64;
                while let Some(item) = sub.next().await {
                    match item {
                        BusItem::Event(e) => {
                            got += 1;
                            if e.seq == events {
                                break;
                            }
                        }
                        BusItem::Lagged { missed, .. } => got += missed,
                    }
                }
                got
            })
        })
        .collect();
    let started = Instant::now();
    for i in 0..events {
        bus.emit(None, EventKind::TurnStart { turn: i as u32 })
            .await;
    }
    let mut delivered = 0;
    for t in tasks {
        delivered += t.await.unwrap_or(0);
    }
    delivered as f64 / started.elapsed().as_secs_f64()
}

pub(super) async fn raw_round(subscribers: usize, events: u64) -> f64 {
    let (tx, _) = broadcast::channel::<Arc<u64>>(CAPACITY);
    let tasks: Vec<_> = (0..subscribers)
        .map(|_| {
            let mut rx = tx.subscribe();
            tokio::spawn(async move {
                let mut got = 0u64;
                loop {
                    match rx.recv().await {
                        Ok(v) => {
                            got += 1;
                            if *v == events {
                                break;
                            }
                        }
                        Err(broadcast::error::RecvError::Lagged(n)) => got += n,
                        Err(broadcast::error::RecvError::Closed) => break,
                    }
                }
                got
            })
        })
        .collect();
    let started = Instant::now();
    for i in 1..=events {
        let _ = tx.send(Arc::new(i));
        tokio::task::coop::consume_budget().await;
    }
    let mut delivered = 0;
    for t in tasks {
        delivered += t.await.unwrap_or(0);
    }
    delivered as f64 / started.elapsed().as_secs_f64()
}

/// `bus_1`, `bus_8`, `bus_64`.
pub async fn fanout(ctx: &Ctx) -> Result<Vec<Figure>, String> {
    let events: u64 = if ctx.quick { 20_000 } else { 100_000 };
    let runs = ctx.runs().min(9);
    let mut figures = Vec::new();
    for subscribers in [1usize, 8, 64] {
        let mut rho = Vec::new();
        let mut raw = Vec::new();
        for _ in 0..=runs {
            rho.push(rho_round(subscribers, events).await);
            raw.push(raw_round(subscribers, events).await);
        }
        figures.push(Figure::paired(
            format!("bus_{subscribers}"),
            "events/s",
            format!("raw tokio broadcast, {subscribers} receivers"),
            &mut rho[1..],
            &mut raw[1..],
        ));
    }
    Ok(figures)
}
