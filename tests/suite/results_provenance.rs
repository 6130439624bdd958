//! Shipped results reproduce from the files they name (issue 53 §1). Each results folder's
//! `produced.json` (written by `scripts/reproduce.py`) lists every run whose files it ships,
//! with the run's `resolved.toml` as the run wrote it (`resolved/RUN.toml`) and where the run
//! came from: an experiment file with `--set` overrides, a sweep file and a run name, or an
//! imported model. Each shipped configuration is read with today's loader and compared with
//! what its source resolves to today, so that a changed default or a changed experiment file
//! fails here until the result is re-run. Machine-specific keys are not compared:
//! `run.out_dir` and `data.cache_dir` (where the run and the token shards were written).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Results folders that have no `produced.json` yet, with why (an entry whose folder now has
/// one fails: remove it from this list).
const NOT_REPRODUCED: [(&str, &str); 7] = [
    (
        "bench",
        "benchmark history: timings of their own machines, named in each row, not one recipe's output",
    ),
    (
        "gpu_h100_cuda",
        "a GPU measurement (scripts/gpu_checks.sh on a lent H100); no GPU here to re-run it",
    ),
    ("cpu_attention_ops", CPU_SWEEP),
    ("cpu_depth", CPU_SWEEP),
    ("smollm2_slot", NOT_YET),
    ("streaming", NOT_YET),
    (
        "remedies",
        "its two sweeps were run with `sinklab sweep` (experiments/sweeps/{bb,cpu}/remedies.toml; \
         the study README gives the commands and times) before a recipe was written",
    ),
];

/// Why the CPU sweeps are not re-run yet.
const CPU_SWEEP: &str = "a CPU sweep of 20–40 minutes on two cores: its recipe is written \
                         (produced.json) but has not been run by scripts/reproduce.py yet";

/// Why a folder with a recipe is not re-run yet.
const NOT_YET: &str = "its recipe is written (produced.json) but has not been run by \
                       scripts/reproduce.py yet";

/// TOML paths that say where a run was written, not what it computed.
const MACHINE_SPECIFIC: [&str; 2] = ["run.out_dir", "data.cache_dir"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn results_dir() -> PathBuf {
    root().join("experiments/results")
}

/// An experiment as a TOML table, without the machine-specific keys.
fn comparable(exp: &sinklab::config::Experiment) -> toml::Table {
    let mut t: toml::Table = toml::from_str(&exp.to_toml()).expect("to_toml parses");
    for path in MACHINE_SPECIFIC {
        let (section, key) = path.split_once('.').unwrap();
        if let Some(toml::Value::Table(s)) = t.get_mut(section) {
            s.remove(key);
        }
    }
    t
}

/// Today's resolution of one recorded source; `Ok(None)` for a source that cannot be resolved
/// without files outside the repository (an imported model).
fn resolve_source(
    entry: &serde_json::Value,
    sweeps: &mut BTreeMap<String, Vec<(String, sinklab::config::Experiment)>>,
) -> Result<Option<sinklab::config::Experiment>, String> {
    let run = entry["run"].as_str().unwrap_or("?");
    if let Some(file) = entry["experiment"].as_str() {
        let set: Vec<String> = entry["set"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        return sinklab::config::load(&root().join(file), &set)
            .map(Some)
            .map_err(|e| format!("{file} with --set {set:?} does not load today:\n{e}"));
    }
    if let Some(file) = entry["sweep"].as_str() {
        if !sweeps.contains_key(file) {
            let (plan, exps) = sinklab::sweep::expand(&root().join(file))
                .map_err(|e| format!("sweep {file} does not expand today: {e:#}"))?;
            let runs = plan.runs.iter().map(|r| r.name.clone()).zip(exps).collect();
            sweeps.insert(file.to_string(), runs);
        }
        return sweeps[file]
            .iter()
            .find(|(name, _)| name == run)
            .map(|(_, exp)| Some(exp.clone()))
            .ok_or_else(|| format!("sweep {file} has no run named {run} today"));
    }
    if entry["imported"].is_string() {
        return Ok(None);
    }
    Err(format!(
        "no source recorded (experiment, sweep or imported): {entry}"
    ))
}

/// Every problem with one results folder's record, each naming the folder, the run and (for a
/// difference) every TOML path that differs, shipped value → today's.
fn check_folder(folder: &Path) -> Vec<String> {
    let name = folder
        .strip_prefix(root())
        .unwrap_or(folder)
        .display()
        .to_string();
    let record: serde_json::Value = match std::fs::read_to_string(folder.join("produced.json"))
        .map_err(|e| e.to_string())
        .and_then(|s| serde_json::from_str(&s).map_err(|e| e.to_string()))
    {
        Ok(r) => r,
        Err(e) => return vec![format!("{name}/produced.json: {e}")],
    };
    let Some(entries) = record["produced"]["resolved"].as_array() else {
        return vec![format!(
            "{name}/produced.json: no produced.resolved (run scripts/reproduce.py {name})"
        )];
    };
    let mut problems = Vec::new();
    let mut sweeps = BTreeMap::new();
    for entry in entries {
        let run = entry["run"].as_str().unwrap_or("?");
        let at = format!("{name}: run {run}");
        let file = folder.join(entry["file"].as_str().unwrap_or(""));
        let shipped = match std::fs::read_to_string(&file) {
            Ok(text) => sinklab::config::from_str(&file.display().to_string(), &text),
            Err(e) => {
                problems.push(format!("{at}: {}: {e}", file.display()));
                continue;
            }
        };
        let shipped = match shipped {
            Ok(exp) => exp,
            Err(e) => {
                problems.push(format!(
                    "{at}: the shipped resolved configuration does not load today:\n{e}"
                ));
                continue;
            }
        };
        match resolve_source(entry, &mut sweeps) {
            Ok(Some(today)) => {
                let changes = sinklab::config::diff(&comparable(&shipped), &comparable(&today));
                if !changes.is_empty() {
                    problems.push(format!(
                        "{at}: the shipped configuration (as run → as its source resolves \
                         today) differs; re-run with scripts/reproduce.py {name}:\n    {}",
                        changes.join("\n    ")
                    ));
                }
            }
            Ok(None) => {}
            Err(e) => problems.push(format!("{at}: {e}")),
        }
    }
    problems
}

fn folders() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(results_dir())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    v.sort();
    v
}

/// Whether a folder's `produced.json` records a run (a recipe alone, not yet run, does not).
fn produced(folder: &Path) -> bool {
    std::fs::read_to_string(folder.join("produced.json"))
        .ok()
        .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
        .is_some_and(|r| r.get("produced").is_some())
}

#[test]
fn shipped_configurations_equal_what_their_files_resolve_to_today() {
    let mut problems = Vec::new();
    let mut checked = 0;
    for folder in folders().into_iter().filter(|f| produced(f)) {
        problems.extend(check_folder(&folder));
        checked += 1;
    }
    assert!(checked > 0, "no produced.json under experiments/results/");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_results_folder_has_a_record_or_says_why_not() {
    let listed: BTreeMap<&str, &str> = NOT_REPRODUCED.into_iter().collect();
    let mut problems = Vec::new();
    for folder in folders() {
        let name = folder.file_name().unwrap().to_string_lossy().to_string();
        match (produced(&folder), listed.get(name.as_str())) {
            (false, None) => problems.push(format!(
                "experiments/results/{name}: no produced.json with a run in it (write its \
                 recipe and run scripts/reproduce.py, or list it in NOT_REPRODUCED with why)"
            )),
            (true, Some(_)) => problems.push(format!(
                "experiments/results/{name} has a produced.json: remove it from NOT_REPRODUCED"
            )),
            _ => {}
        }
    }
    for name in listed.keys() {
        if !results_dir().join(name).is_dir() {
            problems.push(format!(
                "NOT_REPRODUCED lists {name}, which is not a folder"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The case issue 53 found: `induction/`'s configuration was run with `kernel = "manual"` after
/// the experiment file's default had become `fused`. A copy of the folder whose shipped
/// configuration says `manual` fails, naming the folder, the run and the key.
#[test]
fn a_result_run_with_another_kernel_fails() {
    let shipped = results_dir().join("induction");
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("induction");
    std::fs::create_dir_all(copy.join("resolved")).unwrap();
    std::fs::copy(shipped.join("produced.json"), copy.join("produced.json")).unwrap();
    // every run's resolved file but the one under test
    for e in std::fs::read_dir(shipped.join("resolved")).unwrap() {
        let e = e.unwrap();
        if e.file_name() != "induction.toml" {
            std::fs::copy(e.path(), copy.join("resolved").join(e.file_name())).unwrap();
        }
    }
    let text = std::fs::read_to_string(shipped.join("resolved/induction.toml")).unwrap();
    assert!(
        check_folder(&copy).len() == 1,
        "the copy lacks its resolved file"
    );
    let fused = "kernel = \"fused\"";
    assert_eq!(text.matches(fused).count(), 1, "{text}");
    std::fs::write(
        copy.join("resolved/induction.toml"),
        text.replace(fused, "kernel = \"manual\""),
    )
    .unwrap();
    let problems = check_folder(&copy);
    assert_eq!(problems.len(), 1, "{problems:#?}");
    let p = &problems[0];
    assert!(p.contains("run induction"), "{p}");
    assert!(
        p.contains("model.attention.kernel: \"manual\" → \"fused\""),
        "{p}"
    );
    let paths = p.lines().filter(|l| l.starts_with("    ")).count();
    assert_eq!(paths, 1, "only the kernel differs: {p}");
    // The folder as shipped passes, wherever its run directory was.
    std::fs::write(
        copy.join("resolved/induction.toml"),
        text.replace("out_dir = \"runs\"", "out_dir = \"/elsewhere\""),
    )
    .unwrap();
    assert_eq!(check_folder(&copy), Vec::<String>::new());
}
