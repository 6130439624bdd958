//! `sinklab sweep`.

use crate::config::Experiment;
use crate::memory::{self, Available, human};
use crate::sweep::{self, slurm};
use crate::train;
use anyhow::{Context, Result, bail};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Sweep TOML file (base, axes, combine, seeds, [slurm]; see `experiments/sweeps/`).
    pub file: PathBuf,
    /// Runs at a time (each gets cores / N threads).
    #[arg(long, default_value_t = 1)]
    pub jobs: usize,
    /// Run only the run with this index (a SLURM array task).
    #[arg(long)]
    pub index: Option<usize>,
    /// Print the expanded runs and write the plan without running anything.
    #[arg(long)]
    pub dry_run: bool,
    /// Write job scripts instead of running: `slurm` (a job array with one task per run, and
    /// the report as a job of its own; `--submit` submits them).
    #[arg(long, value_name = "SYSTEM")]
    pub emit: Option<Emit>,
    /// Write the SLURM scripts and submit them with sbatch: a job array over the runs not yet
    /// finished, then the report as a job that starts when the array has ended
    /// (--dependency=afterany). Prints the job ids.
    #[arg(long, conflicts_with_all = ["dry_run", "index", "jobs"])]
    pub submit: bool,
    /// With --submit: do not submit the report job.
    #[arg(long, requires = "submit")]
    pub no_report: bool,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Put the sweep directory under DIR instead of the file's `out_dir` (runs/sweeps).
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
    /// Start the runs even when their memory estimates exceed what the machine has: skips the
    /// check that the runs in flight together fit, and is passed on to every run. (Not for
    /// --emit/--submit: each SLURM task checks the node it runs on.)
    #[arg(long, conflicts_with_all = ["emit", "submit"])]
    pub skip_memory_check: bool,
}

/// What `--emit` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Emit {
    /// A SLURM job array (`slurm.sh`) and the report job (`slurm-report.sh`).
    Slurm,
}

/// The cluster's options for `--emit slurm` / `--submit`, over the sweep file's `[slurm]`
/// table. One not given in either place gets no `#SBATCH` line: the cluster's default applies.
#[derive(clap::Args)]
pub struct ClusterArgs {
    /// SLURM partition (or several, comma-separated).
    #[arg(long, value_name = "NAME")]
    pub partition: Option<String>,
    /// SLURM account charged for the jobs.
    #[arg(long, value_name = "NAME")]
    pub account: Option<String>,
    /// Time limit per task: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS.
    #[arg(long, value_name = "LIMIT")]
    pub time: Option<String>,
    /// GPUs per task (--gres=gpu:N; with --ranks per rank, --gpus-per-task=N); by default 1
    /// for runs on a GPU backend, none for CPU runs.
    #[arg(long, value_name = "N")]
    pub gpus_per_task: Option<u32>,
    /// CPUs per task (with --ranks per rank); a task (rank) trains with that many threads.
    #[arg(long, value_name = "N")]
    pub cpus_per_task: Option<u32>,
    /// MPI ranks per run (--ntasks): each run starts as `srun --mpi=PLUGIN --ntasks=N sinklab
    /// train`, one rank per GPU or CPU share (a sinklab built with the `mpi` feature). With
    /// --index (what the array task runs): start the run that way.
    #[arg(long, value_name = "N")]
    pub ranks: Option<u32>,
    /// Machines per run (--nodes), at most --ranks.
    #[arg(long, value_name = "N")]
    pub nodes: Option<u32>,
    /// srun's MPI plugin for runs of several ranks (default pmix; `srun --mpi=list`).
    #[arg(long, value_name = "PLUGIN")]
    pub mpi: Option<String>,
}

impl ClusterArgs {
    fn options(&self) -> slurm::Options {
        slurm::Options {
            partition: self.partition.clone(),
            account: self.account.clone(),
            time: self.time.clone(),
            gpus_per_task: self.gpus_per_task,
            cpus_per_task: self.cpus_per_task,
            ranks: self.ranks,
            nodes: self.nodes,
            mpi: self.mpi.clone(),
            extra: Vec::new(),
        }
    }
}

pub fn run(a: Args) -> Result<()> {
    let (plan, exps) = sweep::expand_into(&a.file, a.out_dir.as_deref())?;
    // One launcher per sweep directory (a second stops at once, naming the first); the tasks
    // of a SLURM array (`--index`) run side by side, each holding only its run's lock.
    let _lock = match a.index {
        Some(_) => None,
        None => {
            std::fs::create_dir_all(&plan.dir)
                .with_context(|| format!("creating {}", plan.dir.display()))?;
            Some(crate::lock::acquire(&plan.dir, "sweep")?)
        }
    };
    let mut flags = a.cluster.options();
    if a.emit.is_some() || a.submit {
        return emit_slurm(&a, &plan, &exps, &flags);
    }
    // An array task of a sweep with ranks (`--index I --ranks R --mpi P`) starts its run as
    // MPI ranks with srun.
    let ranks = match (a.index, flags.ranks.take(), flags.mpi.take()) {
        (Some(_), Some(r), mpi) if r > 1 => Some(slurm::RankLaunch {
            ranks: r,
            mpi: mpi.unwrap_or_else(|| slurm::DEFAULT_MPI.to_string()),
        }),
        (Some(_), Some(_) | None, None) => None,
        (index, r, mpi) => {
            flags.ranks = r.filter(|_| index.is_none());
            flags.mpi = mpi;
            None
        }
    };
    if ranks.is_some() && std::env::var_os("SLURM_JOB_ID").is_none() {
        bail!(
            "--ranks with --index starts the run with srun, inside a SLURM job (the array \
             task of `sinklab sweep --submit`); outside SLURM train with `mpirun -np N sinklab \
             train plans/RUN.toml --resume`"
        );
    }
    if flags != slurm::Options::default() {
        bail!(
            "--partition, --account, --time, --gpus-per-task, --cpus-per-task, --nodes and \
             --mpi apply to --emit slurm and --submit (--ranks and --mpi also to an array task's \
             --index)"
        );
    }
    if a.dry_run {
        sweep::write_plan(&plan, &exps)?;
        println!("sweep {} → {}", plan.name, plan.dir.display());
        for r in &plan.runs {
            println!("{:>4}  {}", r.index, r.name);
        }
        return Ok(());
    }
    if !a.skip_memory_check {
        let only: Vec<&Experiment> = match a.index {
            Some(i) => exps.get(i).into_iter().collect(),
            None => exps.iter().collect(),
        };
        memory_fits_together(&only, a.jobs)?;
    }
    ctrlc::set_handler(|| {
        sweep::STOP.store(true, std::sync::atomic::Ordering::SeqCst);
        train::INTERRUPT.store(true, std::sync::atomic::Ordering::SeqCst);
    })?;
    let how = (a.jobs, a.index, ranks.as_ref());
    let o = sweep::run(&plan, &exps, how, a.skip_memory_check, &|m| {
        eprintln!("{m}")
    })?;
    println!(
        "sweep {}: {} done, {} skipped (already finished), {} failed, {} interrupted, {} busy",
        plan.name,
        o.done.len(),
        o.skipped.len(),
        o.failed.len(),
        o.interrupted.len(),
        o.busy.len()
    );
    for (name, err) in &o.failed {
        println!("failed: {name}\n  {}", err.replace('\n', "\n  "));
    }
    for (name, holder) in &o.busy {
        println!("busy: {name} is being trained by another process ({holder}); left to it");
    }
    println!("report: sinklab report {}", plan.dir.display());
    if !o.interrupted.is_empty() {
        println!("interrupted runs resume when the sweep is run again");
        std::process::exit(130);
    }
    if !o.failed.is_empty() {
        std::process::exit(1);
    }
    if !o.busy.is_empty() {
        std::process::exit(crate::lock::EXIT_BUSY);
    }
    Ok(())
}

/// `--emit slurm` and `--submit`.
fn emit_slurm(
    a: &Args,
    plan: &sweep::Plan,
    exps: &[crate::config::Experiment],
    flags: &slurm::Options,
) -> Result<()> {
    let cluster = slurm::resolve(&plan.slurm, flags, exps)
        .map_err(|e| anyhow::anyhow!("{}: SLURM options:\n{e}", a.file.display()))?;
    let exe = std::env::current_exe()?;
    let cwd = std::env::current_dir()?;
    let inv = slurm::Invocation {
        exe: &exe,
        cwd: &cwd,
        out_dir: a.out_dir.as_deref(),
    };
    let e = slurm::emit(plan, exps, &cluster, &inv)?;
    println!(
        "wrote {} ({} array tasks) and {}; SLURM output goes to {}/",
        e.array_script.display(),
        plan.runs.len(),
        e.report_script.display(),
        e.logs.display()
    );
    println!("cluster options:\n{}", cluster.describe());
    if !a.submit {
        let out = a
            .out_dir
            .as_ref()
            .map_or(String::new(), |d| format!(" --out-dir {}", d.display()));
        println!(
            "submit with: sinklab sweep {}{out} --submit   (or: sbatch {})",
            a.file.display(),
            e.array_script.display()
        );
        return Ok(());
    }
    let s = slurm::submit(plan, exps, &e, !a.no_report)?;
    let Some((job, todo)) = &s.array else {
        println!(
            "every run of sweep {} has finished ({}); nothing submitted\nreport: sinklab report {}",
            plan.name,
            crate::progress::count(s.finished.len(), "run", None),
            plan.dir.display()
        );
        return Ok(());
    };
    println!(
        "submitted job array {job}: {} of {} ({} finished, skipped), tasks {}; output in {}/slurm-{job}_TASK.out",
        todo.len(),
        crate::progress::count(plan.runs.len(), "run", None),
        s.finished.len(),
        slurm::array_ranges(todo),
        e.logs.display()
    );
    match &s.report {
        Some(r) => println!(
            "submitted report job {r} (--dependency=afterany:{job}): writes {}/report.md; output in {}/slurm-report-{r}.out",
            plan.dir.display(),
            e.logs.display()
        ),
        None => println!(
            "no report job (--no-report); afterwards: sinklab report {}",
            plan.dir.display()
        ),
    }
    let ids = [Some(job.clone()), s.report.clone()]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(",");
    println!(
        "follow with: squeue -j {ids}; stop with: scancel {job} (runs checkpoint and resume on the next --submit)"
    );
    Ok(())
}

/// The runs that may be in flight together fit: for each device kind, the `jobs` largest
/// memory estimates (each run with the cores over `jobs` threads) sum to no more than the
/// device has. A run too large on its own is refused here with its own message.
fn memory_fits_together(exps: &[&Experiment], jobs: usize) -> Result<()> {
    let mut kinds = Vec::new();
    for e in exps {
        if !kinds.contains(&e.run.device) {
            kinds.push(e.run.device);
        }
    }
    for kind in kinds {
        let available = memory::device_memory(kind);
        let Available::Known {
            bytes: avail,
            source,
        } = &available
        else {
            continue;
        };
        // the `j` largest estimates with `j` runs at a time, largest first
        let largest = |j: usize| -> Result<Vec<(u64, &Experiment)>> {
            let threads = sweep::threads_per_run(j);
            let mut est = Vec::new();
            for e in exps.iter().filter(|e| e.run.device == kind) {
                let c = memory::Check::with(
                    e,
                    threads,
                    available.clone(),
                    crate::model::trainable_elements(e)?,
                )?;
                if c.fits() == Some(false) {
                    bail!("run {}: {}", e.run.name, c.refusal(e));
                }
                est.push((c.estimate.total, *e));
            }
            est.sort_by_key(|x| std::cmp::Reverse(x.0));
            est.truncate(j);
            Ok(est)
        };
        let sum = |v: &[(u64, &Experiment)]| v.iter().map(|x| x.0).sum::<u64>();
        let top = largest(jobs.max(1))?;
        if sum(&top) <= *avail {
            continue;
        }
        let mut fitting = 1;
        for j in (1..jobs).rev() {
            if sum(&largest(j)?) <= *avail {
                fitting = j;
                break;
            }
        }
        let names: Vec<String> = top
            .iter()
            .map(|(b, e)| format!("{} {}", e.run.name, human(*b)))
            .collect();
        bail!(
            "memory: {} runs at a time may not fit on {}: the {} largest estimates sum to {} \
             ({}) but {} is available ({source}). Use --jobs {fitting}, or pass {} if you know \
             they fit.",
            jobs,
            kind.name(),
            top.len(),
            human(sum(&top)),
            names.join(", "),
            human(*avail),
            memory::SKIP_FLAG
        );
    }
    Ok(())
}
