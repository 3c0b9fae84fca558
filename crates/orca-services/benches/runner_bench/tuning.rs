//! The tuning loops of the runner benchmark: one figure, several times in one process, to see
//! a change's effect through the machine's noise (`--claims-only`, `--makespans N`).

use super::{Backend, BenchAgent, BoxError, Figure, Load, Mode, Sizes, layered, run, workers_run};

/// `--claims-only`: tasks claimed one by one, 1 and 4 workers, `reps` times (to tune claiming).
pub(crate) async fn claims_only(sizes: &Sizes, reps: usize) -> Result<Vec<Figure>, BoxError> {
    let server = orca_testkit::postgres::Throwaway::start(true)?;
    let mut out = Vec::new();
    for _ in 0..reps {
        // Each run on a database of its own, as in the full benchmark.
        let one = sizes.wide as f64
            / workers_run(
                &server.create_database().await?,
                Mode::Task,
                1,
                Load::wide(sizes),
            )
            .await?
            .wall
            .as_secs_f64();
        let four = sizes.wide as f64
            / workers_run(
                &server.create_database().await?,
                Mode::Task,
                4,
                Load::wide(sizes),
            )
            .await?
            .wall
            .as_secs_f64();
        out.push(Figure {
            name: "pg_claim_task_4w_vs_1w",
            value: four / one,
            unit: "x",
            target: None,
            description: format!("1 worker {one:.0}/s, 4 workers {four:.0}/s"),
        });
    }
    Ok(out)
}

/// `--makespans`: the 8 × 8 DAG on every backend, `reps` times (to tune the makespan ratio).
pub(crate) async fn makespans(sizes: &Sizes, reps: usize) -> Result<Vec<Figure>, BoxError> {
    let (layers, width) = sizes.dag;
    let critical = sizes.delay * u32::try_from(layers).unwrap_or(u32::MAX);
    let server = orca_testkit::postgres::Throwaway::start(true)?;
    let mut out = Vec::new();
    for _ in 0..reps {
        let pg_url = server.create_database().await?;
        for (backend, name) in [
            (Backend::Memory, "dag_makespan_ratio_memory"),
            (Backend::File, "dag_makespan_ratio_file"),
            (Backend::Postgres(pg_url), "dag_makespan_ratio_postgres"),
        ] {
            let wall = run(
                &backend,
                BenchAgent::new(sizes.delay),
                layered(layers, width)?,
                width,
            )
            .await?;
            out.push(Figure {
                name,
                value: wall.as_secs_f64() / critical.as_secs_f64(),
                unit: "x",
                target: Some(1.10),
                description: format!("makespan {:.1} ms", wall.as_secs_f64() * 1e3),
            });
        }
    }
    Ok(out)
}
