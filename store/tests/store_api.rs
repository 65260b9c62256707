//! The store's public API: import, runs with real decodes, queries, presets, chat history, MoE
//! calibrations, disk usage and safe removal.

mod common;

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::frames::frames;
use common::models::{gguf_without_tokenizer, tiny_llada, tiny_llada_gguf};
use unmask_engine::backend::cpu::CpuBackend;
use unmask_engine::decode::{generate, CancelFlag, DecodeSettings, StepFrame};
use unmask_engine::model::load_model;
use unmask_engine::trace::{Lane, LanePower, Timeline, TraceEvent};
use unmask_store::{
    ImportEvent, ImportOptions, MessageRole, ModelFormat, NewConversation, NewPreset, NewRun, RunOutcome, RunSpeculation,
    RunStatus, Store, StoreError, StoredTimeline, Validation,
};

/// Copies the model files of tiny-llada into `dir` (what a user's download folder holds).
fn copy_model(dir: &Path) -> PathBuf {
    let m = dir.join("my-llada");
    std::fs::create_dir_all(&m).unwrap();
    for f in ["config.json", "tokenizer.json", "model.safetensors", "generation_config.json", "README.md"] {
        let src = tiny_llada().join(f);
        if src.exists() {
            std::fs::copy(&src, m.join(f)).unwrap();
        } else {
            std::fs::write(m.join(f), "# notes\n").unwrap();
        }
    }
    m
}

#[tokio::test]
async fn import_copies_hashes_and_registers_and_refuses_duplicates() {
    let data = tempfile::tempdir().unwrap();
    let src = tempfile::tempdir().unwrap();
    let model_dir = copy_model(src.path());
    let store = Store::open(data.path()).await.unwrap();
    let mut events = Vec::new();
    let opts = ImportOptions { name: None, in_place: false, validation: Validation::Full };
    let m = store.import_model_with(&model_dir, &opts, &mut |e| events.push(e)).await.unwrap();
    assert_eq!((m.name.as_str(), m.format, m.architecture.as_str()), ("my-llada", ModelFormat::Hf, "llada"));
    assert_eq!(m.path, "models/my-llada");
    assert!(!m.in_place);
    // The embedded model's weights are stored in one dtype; the record names it.
    let header = std::fs::read(model_dir.join("model.safetensors")).unwrap();
    let dtype_seen = ["\"F32\"", "\"BF16\"", "\"F16\""].into_iter().find(|d| header.windows(d.len()).any(|w| w == d.as_bytes()));
    assert_eq!(Some(format!("\"{}\"", m.quantization).as_str()), dtype_seen);
    assert!(m.source.starts_with("import:"));
    assert_eq!(m.engine_config().unwrap().arch, unmask_engine::model::Architecture::Llada);
    assert_eq!(events.first(), Some(&ImportEvent::Validating));
    assert_eq!(events.last(), Some(&ImportEvent::Registered { model_id: m.id }));
    let total: u64 = ["config.json", "tokenizer.json", "model.safetensors", "generation_config.json", "README.md"]
        .iter()
        .map(|f| std::fs::metadata(model_dir.join(f)).unwrap().len())
        .sum();
    assert!(
        events.contains(&ImportEvent::Hashing { file: "README.md".into(), done: total, total })
            || events.iter().any(|e| matches!(e, ImportEvent::Hashing { done, .. } if *done == total))
    );
    assert_eq!(m.size_bytes, total);
    // Copied: the engine loads the copy; the source stays.
    let copy = store.model_path(&m);
    assert_eq!(copy, data.path().join("models").join("my-llada"));
    load_model(&copy).unwrap();
    assert!(model_dir.join("model.safetensors").exists());
    let files = store.model_files(m.id).await.unwrap();
    assert_eq!(
        files.iter().map(|f| f.rel_path.as_str()).collect::<Vec<_>>(),
        ["README.md", "config.json", "generation_config.json", "model.safetensors", "tokenizer.json"]
    );

    // Same name, or same content under another name (even in place, even with other docs): refused.
    let e = store.import_model(&model_dir, None, true).await.unwrap_err();
    assert!(matches!(e, StoreError::DuplicateName(ref n) if n == "my-llada"), "{e}");
    std::fs::write(model_dir.join("README.md"), "# other notes\n").unwrap();
    let e = store.import_model(&model_dir, Some("copy2"), true).await.unwrap_err();
    assert!(matches!(e, StoreError::DuplicateModel { ref existing, .. } if existing == "my-llada"), "{e}");
    assert_eq!(store.list_models().await.unwrap().len(), 1);
    // No staging folders left behind by the refused import.
    let names: Vec<String> = std::fs::read_dir(data.path().join("models"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["my-llada"]);
}

#[tokio::test]
async fn import_in_place_and_gguf() {
    let data = tempfile::tempdir().unwrap();
    let store = Store::open(data.path()).await.unwrap();
    let m = store.import_model(&tiny_llada(), None, true).await.unwrap();
    assert!(m.in_place);
    assert_eq!(Path::new(&m.path), tiny_llada().canonicalize().unwrap());
    assert_eq!(store.model_path(&m), tiny_llada().canonicalize().unwrap());
    assert!(!data.path().join("models/tiny-llada").exists());

    let g = store
        .import_model_with(
            &tiny_llada_gguf(),
            &ImportOptions { name: Some("llama-q8".into()), in_place: false, validation: Validation::Metadata },
            &mut |_| {},
        )
        .await
        .unwrap();
    assert_eq!((g.format, g.architecture.as_str(), g.quantization.as_str()), (ModelFormat::Gguf, "llada", "Q8_0"));
    assert_eq!(g.path, "models/llama-q8/tiny-llada-q8_0.gguf");
    assert_eq!(std::fs::read(store.model_path(&g)).unwrap(), std::fs::read(tiny_llada_gguf()).unwrap());
    let names: Vec<String> = store.list_models().await.unwrap().into_iter().map(|m| m.name).collect();
    assert_eq!(names, ["llama-q8", "tiny-llada"]);
    // The same GGUF again, in place this time: the same content, refused.
    let again = store.import_model(&tiny_llada_gguf(), None, true).await.unwrap_err();
    assert!(matches!(again, StoreError::DuplicateModel { ref existing, .. } if existing == "llama-q8"), "{again}");
}

#[tokio::test]
async fn unreadable_and_invalid_models_are_refused_with_clear_errors() {
    let data = tempfile::tempdir().unwrap();
    let store = Store::open(data.path()).await.unwrap();
    let src = tempfile::tempdir().unwrap();

    let e = store.import_model(&src.path().join("missing"), None, false).await.unwrap_err();
    assert!(matches!(e, StoreError::Io { .. }), "{e}");

    let junk = src.path().join("junk.gguf");
    std::fs::write(&junk, b"definitely not a gguf file").unwrap();
    let e = store.import_model(&junk, None, false).await.unwrap_err();
    assert!(matches!(e, StoreError::InvalidModel(_)), "{e}");
    assert!(e.to_string().contains("junk.gguf"), "{e}");

    // A valid GGUF the engine cannot chat with (no tokenizer).
    let e = store.import_model(&gguf_without_tokenizer(), None, true).await.unwrap_err();
    assert!(matches!(e, StoreError::InvalidModel(_)), "{e}");
    assert!(e.to_string().contains("tokenizer"), "{e}");

    let other = src.path().join("notes.txt");
    std::fs::write(&other, b"hello").unwrap();
    let e = store.import_model(&other, None, false).await.unwrap_err();
    assert!(matches!(e, StoreError::InvalidRequest(_)), "{e}");

    // A directory whose config is broken.
    let bad_cfg = copy_model(src.path());
    std::fs::write(bad_cfg.join("config.json"), b"{ not json").unwrap();
    let e = store.import_model(&bad_cfg, Some("bad-config"), false).await.unwrap_err();
    assert!(matches!(e, StoreError::InvalidModel(_)), "{e}");

    // Truncated weights: the header claims more bytes than the file has.
    let trunc = src.path().join("trunc");
    std::fs::create_dir_all(&trunc).unwrap();
    for f in ["config.json", "tokenizer.json"] {
        std::fs::copy(tiny_llada().join(f), trunc.join(f)).unwrap();
    }
    let w = std::fs::read(tiny_llada().join("model.safetensors")).unwrap();
    std::fs::write(trunc.join("model.safetensors"), &w[..w.len() / 2]).unwrap();
    for v in [Validation::Metadata, Validation::Full] {
        let opts = ImportOptions { name: Some("trunc".into()), in_place: false, validation: v };
        let e = store.import_model_with(&trunc, &opts, &mut |_| {}).await.unwrap_err();
        assert!(matches!(e, StoreError::InvalidModel(_)), "{v:?}: {e}");
    }

    // Names that could escape the models folder.
    for name in ["../x", "a/b", ".hidden", ""] {
        let e = store.import_model(&tiny_llada(), Some(name), true).await.unwrap_err();
        assert!(matches!(e, StoreError::UnsafeName { .. }), "{name}: {e}");
    }
    assert!(store.list_models().await.unwrap().is_empty());
    assert_eq!(std::fs::read_dir(data.path().join("models")).unwrap().count(), 0);
}

/// Decodes `prompt` on tiny-llada while recording; returns the run and the frames the decoder emitted.
async fn decode_and_record(
    store: &Store,
    model: &unmask_store::ModelRecord,
    prompt: &str,
    settings: DecodeSettings,
) -> (unmask_store::RunRecord, Vec<StepFrame>) {
    let path = store.model_path(model);
    let mut rec = store.start_run(NewRun::new(model, &unmask_engine::run::BackendSpec::Cpu, prompt, settings.clone())).await.unwrap();
    let prompt = prompt.to_owned();
    let (rec, out, text, seen) = tokio::task::spawn_blocking(move || {
        let loaded = load_model(&path).unwrap();
        let ids = loaded.tokenizer.encode(&prompt).unwrap();
        let mut backend = CpuBackend::new(Arc::new(loaded.transformer));
        let mut seen = Vec::new();
        let out = generate(&mut backend, &ids, &settings, &CancelFlag::new(), |f| {
            seen.push(f.clone());
            rec.record(f);
            ControlFlow::Continue(())
        })
        .unwrap();
        let text = loaded.tokenizer.decode(&out.tokens, true);
        (rec, out, text, seen)
    })
    .await
    .unwrap();
    let run = rec.finish(RunOutcome::from_decode(&out, text)).await.unwrap();
    (run, seen)
}

#[tokio::test]
async fn real_decodes_are_recorded_queried_and_compared() {
    let data = tempfile::tempdir().unwrap();
    let store = Store::open(data.path()).await.unwrap();
    let model = store.import_model(&tiny_llada(), None, true).await.unwrap();
    assert!(model.last_used_at.is_none());
    let base = DecodeSettings { gen_length: 16, block_length: 8, steps: 8, ..Default::default() };
    let (a, frames_a) = decode_and_record(&store, &model, "Count the words: red fox", base.clone()).await;
    let fast = DecodeSettings { threshold: Some(0.9), ..base.clone() };
    let (b, frames_b) = decode_and_record(&store, &model, "Count the words: red fox", fast).await;

    assert_eq!(a.status, RunStatus::Completed);
    assert_eq!(a.model_id, Some(model.id));
    assert_eq!(a.settings, base);
    assert_eq!(a.metrics.steps, Some(8));
    assert!(a.metrics.wall_s.unwrap() > 0.0);
    assert_eq!(a.output_tokens.as_ref().unwrap().len(), 16);
    assert_eq!(a.trace_frames, frames_a.len() as u64);
    // The trace reads back exactly as the decoder emitted it.
    assert_eq!(store.run_trace(a.id).await.unwrap(), frames_a);
    assert_eq!(store.run_trace(b.id).await.unwrap(), frames_b);
    assert_eq!(store.run_trace_range(a.id, 2, 3).await.unwrap(), frames_a[2..5].to_vec());
    assert!(store.get_model(model.id).await.unwrap().last_used_at.is_some());

    let recent = store.recent_runs(10, 0).await.unwrap();
    assert_eq!(recent.iter().map(|r| r.id).collect::<Vec<_>>(), [b.id, a.id]);
    assert_eq!(store.recent_runs(1, 1).await.unwrap()[0].id, a.id);
    assert_eq!(store.runs_of_model(model.id, 10, 0).await.unwrap().len(), 2);
    assert!(store.runs_of_model(model.id + 1, 10, 0).await.unwrap().is_empty());

    let cmp = store.compare_runs(a.id, b.id).await.unwrap();
    assert_eq!(cmp.settings_diff.len(), 1);
    assert_eq!(cmp.settings_diff[0].key, "threshold");
    assert_eq!(cmp.settings_diff[0].a, serde_json::Value::Null);
    assert_eq!(cmp.same_output, a.output == b.output);
    let ratio = cmp.ratios["forwards"];
    assert!((ratio - b.metrics.forwards.unwrap() as f64 / a.metrics.forwards.unwrap() as f64).abs() < 1e-12);
    assert_eq!(cmp.first_token_difference.is_none(), a.output_tokens == b.output_tokens);

    assert!(matches!(store.run_detail(9999).await, Err(StoreError::NotFound { .. })));
    assert!(matches!(store.run_trace(9999).await, Err(StoreError::NotFound { .. })));
    store.delete_run(b.id).await.unwrap();
    assert!(matches!(store.run_trace(b.id).await, Err(StoreError::NotFound { .. })));
}

#[tokio::test]
async fn failed_cancelled_runs_and_timelines() {
    let data = tempfile::tempdir().unwrap();
    let store = Store::open(data.path()).await.unwrap();
    let new = |seed| NewRun {
        model_id: None,
        model_name: "ad-hoc".into(),
        backend: unmask_engine::run::BackendSpec::vnpu("sm8750"),
        prompt: "p".into(),
        settings: DecodeSettings { seed, ..Default::default() },
    };
    let mut rec = store.start_run(new(1)).await.unwrap();
    for f in frames(1, 3) {
        rec.record(&f);
    }
    let failed = rec.fail("backend vnpu: out of NPU memory").await.unwrap();
    assert_eq!(failed.status, RunStatus::Failed);
    assert_eq!(failed.error.as_deref(), Some("backend vnpu: out of NPU memory"));
    assert_eq!(store.run_trace(failed.id).await.unwrap(), frames(1, 3));

    let mut timeline = Timeline::new("Snapdragon 8 Elite (SM8750)");
    timeline.push(TraceEvent {
        lane: Lane::Npu,
        name: "matmul".into(),
        category: "matmul".into(),
        start_sim: 0.0,
        dur_sim: 0.001,
        wall_start: 0.0,
        wall_dur: 0.0,
        bytes: 4096,
    });
    timeline.push(TraceEvent {
        lane: Lane::Cpu(1),
        name: "policy".into(),
        category: "vector".into(),
        start_sim: 0.001,
        dur_sim: 0.0005,
        wall_start: 0.0,
        wall_dur: 0.0,
        bytes: 0,
    });
    timeline.push_counter("npu_visible_bytes", 0.0005, 1e6);
    let power = LanePower {
        npu_active_w: 3.0,
        npu_idle_w: 0.1,
        cpu_core_w: vec![1.0, 0.5],
        dma_w: 0.2,
        dram_j_per_byte: 1e-10,
    };
    let stored = StoredTimeline { timeline: timeline.clone(), power: Some(power.clone()) };
    let mut rec = store.start_run(new(2)).await.unwrap();
    rec.record(&frames(2, 1)[0]);
    rec.set_timeline(stored.clone());
    let partial = RunOutcome { output: "half".into(), ..Default::default() };
    let cancelled = rec.cancel(Some(partial)).await.unwrap();
    assert_eq!(cancelled.status, RunStatus::Cancelled);
    assert_eq!(cancelled.output.as_deref(), Some("half"));
    assert!(cancelled.has_timeline && !failed.has_timeline);
    let back = store.run_timeline(cancelled.id).await.unwrap().unwrap();
    assert_eq!(back, stored);
    // A Perfetto export can be produced from the stored timeline.
    let chrome = unmask_engine::trace::to_chrome_trace(&back.timeline, back.power.as_ref().unwrap());
    assert!(chrome["traceEvents"].as_array().unwrap().len() >= 2);
    assert!(store.run_timeline(failed.id).await.unwrap().is_none());
    store.set_run_timeline(failed.id, &StoredTimeline { timeline, power: None }).await.unwrap();
    assert!(store.run_detail(failed.id).await.unwrap().has_timeline);

    // A run of a model that does not exist is refused.
    let e = store.start_run(NewRun { model_id: Some(42), ..new(3) }).await.unwrap_err();
    assert!(matches!(e, StoreError::NotFound { kind: "model", .. }), "{e}");
}

#[tokio::test]
async fn remove_model_deletes_its_files_and_keeps_history() {
    let data = tempfile::tempdir().unwrap();
    let src = tempfile::tempdir().unwrap();
    let store = Store::open(data.path()).await.unwrap();
    let copied = store.import_model(&copy_model(src.path()), None, false).await.unwrap();
    let in_place = store.import_model(&tiny_llada_gguf(), Some("llama"), true).await.unwrap();
    store.put_moe_calibration(copied.id, "experts", &serde_json::json!({"freq": [1, 2]})).await.unwrap();
    let mut rec = store.start_run(NewRun::new(&copied, &unmask_engine::run::BackendSpec::Cpu, "p", DecodeSettings::default())).await.unwrap();
    rec.record(&frames(0, 1)[0]);
    let run = rec.finish(RunOutcome::default()).await.unwrap();
    let conv = store
        .create_conversation(&NewConversation { title: "t".into(), model_id: Some(copied.id), ..Default::default() })
        .await
        .unwrap();

    let usage = store.disk_usage().await.unwrap();
    let cu = usage.models.iter().find(|m| m.id == copied.id).unwrap();
    assert_eq!((cu.bytes, cu.in_place, cu.missing_files), (copied.size_bytes, false, 0));
    assert_eq!(usage.managed_model_bytes, copied.size_bytes);
    assert_eq!(usage.in_place_model_bytes, std::fs::metadata(tiny_llada_gguf()).unwrap().len());
    assert!(usage.database_bytes > 0 && usage.trace_bytes > 0);

    let removed = store.remove_model(copied.id).await.unwrap();
    assert!(removed.files_deleted);
    assert_eq!(removed.freed_bytes, copied.size_bytes);
    assert!(!data.path().join("models/my-llada").exists());
    assert!(matches!(store.get_model(copied.id).await, Err(StoreError::NotFound { .. })));
    assert!(store.list_moe_calibrations(copied.id).await.unwrap().is_empty());
    let run = store.run_detail(run.id).await.unwrap();
    assert_eq!((run.model_id, run.model_name.as_str()), (None, "my-llada"));
    assert_eq!(store.run_trace(run.id).await.unwrap().len(), 1);
    assert_eq!(store.get_conversation(conv.id).await.unwrap().model_id, None);

    // In place: only the record goes; the user's file stays.
    let removed = store.remove_model(in_place.id).await.unwrap();
    assert!(!removed.files_deleted);
    assert!(tiny_llada_gguf().exists());
    assert!(matches!(store.remove_model(in_place.id).await, Err(StoreError::NotFound { .. })));
    store.integrity_check().await.unwrap();
}

#[tokio::test]
async fn remove_model_refuses_paths_outside_the_models_folder() {
    let data = tempfile::tempdir().unwrap();
    let src = tempfile::tempdir().unwrap();
    let store = Store::open(data.path()).await.unwrap();
    let m = store.import_model(&copy_model(src.path()), None, false).await.unwrap();
    let victim = data.path().join("precious");
    std::fs::create_dir_all(&victim).unwrap();
    std::fs::write(victim.join("keep"), b"x").unwrap();
    for bad in ["precious", "models/../precious", "/tmp", "models/.downloads"] {
        sqlx::query("UPDATE models SET path = ? WHERE id = ?")
            .bind(bad)
            .bind(m.id)
            .execute(store.pool())
            .await
            .unwrap();
        let e = store.remove_model(m.id).await.unwrap_err();
        assert!(matches!(e, StoreError::UnsafeName { .. }), "{bad}: {e}");
        assert!(victim.join("keep").exists());
    }
    // A symlink posing as the model's folder is not followed.
    #[cfg(unix)]
    {
        std::fs::remove_dir_all(data.path().join("models/my-llada")).unwrap();
        std::os::unix::fs::symlink(&victim, data.path().join("models/my-llada")).unwrap();
        sqlx::query("UPDATE models SET path = 'models/my-llada' WHERE id = ?")
            .bind(m.id)
            .execute(store.pool())
            .await
            .unwrap();
        assert!(matches!(store.remove_model(m.id).await, Err(StoreError::UnsafeName { .. })));
        assert!(victim.join("keep").exists());
    }
}

#[tokio::test]
async fn presets_crud() {
    let data = tempfile::tempdir().unwrap();
    let store = Store::open(data.path()).await.unwrap();
    let fast = NewPreset {
        name: "fast".into(),
        description: "threshold decoding".into(),
        settings: DecodeSettings { threshold: Some(0.9), ..Default::default() },
        system_prompt: Some("Be brief.".into()),
        backend: Some(unmask_engine::run::BackendSpec::vnpu("sm8750")),
    };
    let p = store.create_preset(&fast).await.unwrap();
    assert_eq!((p.name.as_str(), p.settings.threshold, p.backend.as_ref().map(|b| b.to_string())), ("fast", Some(0.9), Some("vnpu:sm8750".to_string())));
    assert!(matches!(store.create_preset(&fast).await, Err(StoreError::InvalidRequest(_))));
    let q = store.create_preset(&NewPreset { name: "exact".into(), ..Default::default() }).await.unwrap();
    assert_eq!(
        store.list_presets().await.unwrap().iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
        ["exact", "fast"]
    );
    let upd = store.update_preset(p.id, &NewPreset { name: "quick".into(), ..fast.clone() }).await.unwrap();
    assert_eq!(upd.name, "quick");
    assert!(upd.updated_at >= p.updated_at);
    assert!(matches!(
        store.update_preset(q.id, &NewPreset { name: "quick".into(), ..Default::default() }).await,
        Err(StoreError::InvalidRequest(_))
    ));
    assert_eq!(store.preset_by_name("quick").await.unwrap().unwrap().id, p.id);
    store.delete_preset(p.id).await.unwrap();
    assert!(matches!(store.get_preset(p.id).await, Err(StoreError::NotFound { .. })));
    assert!(matches!(store.delete_preset(p.id).await, Err(StoreError::NotFound { .. })));
    assert!(matches!(store.create_preset(&NewPreset::default()).await, Err(StoreError::InvalidRequest(_))));
}

#[tokio::test]
async fn conversations_and_messages() {
    let data = tempfile::tempdir().unwrap();
    let store = Store::open(data.path()).await.unwrap();
    let c1 = store
        .create_conversation(&NewConversation {
            title: "Arithmetic".into(),
            system_prompt: Some("You add.".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let c2 = store.create_conversation(&NewConversation { title: "Words".into(), ..Default::default() }).await.unwrap();
    let mut rec = store
        .start_run(NewRun {
            model_id: None,
            model_name: "m".into(),
            backend: unmask_engine::run::BackendSpec::Cpu,
            prompt: "2+2".into(),
            settings: Default::default(),
        })
        .await
        .unwrap();
    rec.record(&frames(0, 1)[0]);
    let run = rec.finish(RunOutcome { output: "4".into(), ..Default::default() }).await.unwrap();
    let u = store.add_message(c1.id, MessageRole::User, "What is 2+2?", None).await.unwrap();
    let a = store.add_message(c1.id, MessageRole::Assistant, "4", Some(run.id)).await.unwrap();
    store.add_message(c1.id, MessageRole::User, "And 3+3?", None).await.unwrap();
    let msgs = store.messages(c1.id).await.unwrap();
    assert_eq!(
        msgs.iter().map(|m| (m.role, m.content.as_str())).collect::<Vec<_>>(),
        [(MessageRole::User, "What is 2+2?"), (MessageRole::Assistant, "4"), (MessageRole::User, "And 3+3?")]
    );
    assert_eq!(msgs[1].run_id, Some(run.id));
    // Most recently active first.
    assert_eq!(store.list_conversations(10, 0).await.unwrap()[0].id, c1.id);
    assert_eq!(store.search_conversations("3+3", 10).await.unwrap().iter().map(|c| c.id).collect::<Vec<_>>(), [c1.id]);
    assert_eq!(
        store.search_conversations("words", 10).await.unwrap().iter().map(|c| c.id).collect::<Vec<_>>(),
        [c2.id]
    );
    assert!(store.search_conversations("100%", 10).await.unwrap().is_empty());
    // Edit and retry: change the first prompt, drop everything after it.
    store.update_message(u.id, "What is 2+3?").await.unwrap();
    assert_eq!(store.truncate_conversation_at(a.id).await.unwrap(), 2);
    assert_eq!(store.messages(c1.id).await.unwrap().len(), 1);
    let up = store
        .update_conversation(c1.id, &NewConversation { title: "Sums".into(), ..Default::default() })
        .await
        .unwrap();
    assert_eq!((up.title.as_str(), up.system_prompt.as_deref()), ("Sums", None));
    // Bad references and bulk delete.
    assert!(matches!(
        store.add_message(c1.id, MessageRole::Assistant, "x", Some(777)).await,
        Err(StoreError::NotFound { kind: "run", .. })
    ));
    assert!(matches!(
        store.add_message(999, MessageRole::User, "x", None).await,
        Err(StoreError::NotFound { kind: "conversation", .. })
    ));
    // Deleting a run keeps the message, without its link.
    store.add_message(c2.id, MessageRole::Assistant, "4", Some(run.id)).await.unwrap();
    store.delete_run(run.id).await.unwrap();
    assert_eq!(store.messages(c2.id).await.unwrap()[0].run_id, None);
    assert_eq!(store.delete_conversations(&[c1.id, c2.id, 12345]).await.unwrap(), 2);
    assert!(store.list_conversations(10, 0).await.unwrap().is_empty());
    assert!(matches!(store.messages(c1.id).await, Err(StoreError::NotFound { .. })));
}

#[tokio::test]
async fn rename_and_system_prompt_change_only_their_field() {
    let data = tempfile::tempdir().unwrap();
    let store = Store::open(data.path()).await.unwrap();
    let c = store
        .create_conversation(&NewConversation {
            title: "What is 2+2?".into(),
            system_prompt: Some("Answer with a number.".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let renamed = store.rename_conversation(c.id, "Sums").await.unwrap();
    assert_eq!((renamed.title.as_str(), renamed.system_prompt.as_deref()), ("Sums", Some("Answer with a number.")));
    assert!(renamed.updated_at >= c.updated_at);
    // The new title is what search finds.
    let found = store.search_conversations("sums", 10).await.unwrap();
    assert_eq!(found.iter().map(|x| x.id).collect::<Vec<_>>(), [c.id]);
    let changed = store.set_conversation_system_prompt(c.id, Some("Be brief.")).await.unwrap();
    assert_eq!((changed.title.as_str(), changed.system_prompt.as_deref()), ("Sums", Some("Be brief.")));
    let cleared = store.set_conversation_system_prompt(c.id, None).await.unwrap();
    assert_eq!(cleared.system_prompt, None);
    assert!(matches!(
        store.rename_conversation(999, "x").await,
        Err(StoreError::NotFound { kind: "conversation", .. })
    ));
    assert!(matches!(
        store.set_conversation_system_prompt(999, None).await,
        Err(StoreError::NotFound { kind: "conversation", .. })
    ));
}

#[tokio::test]
async fn moe_calibrations_put_get_replace() {
    let data = tempfile::tempdir().unwrap();
    let store = Store::open(data.path()).await.unwrap();
    let m = store.import_model(&tiny_llada_gguf(), None, true).await.unwrap();
    let v1 = serde_json::json!({"layers": [[0.5, 0.25, 0.25]], "device": "sm8750"});
    let c = store.put_moe_calibration(m.id, "expert-frequency", &v1).await.unwrap();
    assert_eq!(c.data, v1);
    let v2 = serde_json::json!({"layers": [[0.1, 0.9, 0.0]]});
    let c2 = store.put_moe_calibration(m.id, "expert-frequency", &v2).await.unwrap();
    assert_eq!((c2.id, c2.data.clone()), (c.id, v2));
    assert_eq!(store.get_moe_calibration(m.id, "expert-frequency").await.unwrap().unwrap().data, c2.data);
    assert!(store.get_moe_calibration(m.id, "other").await.unwrap().is_none());
    assert_eq!(store.list_moe_calibrations(m.id).await.unwrap().len(), 1);
    assert!(store.delete_moe_calibration(m.id, "expert-frequency").await.unwrap());
    assert!(!store.delete_moe_calibration(m.id, "expert-frequency").await.unwrap());
    assert!(matches!(store.put_moe_calibration(m.id + 10, "x", &v1).await, Err(StoreError::NotFound { .. })));
}

#[tokio::test]
async fn speculation_records_are_kept_per_run_replaced_and_deleted_with_it() {
    let data = tempfile::tempdir().unwrap();
    let store = Store::open(data.path()).await.unwrap();
    let new = NewRun {
        model_id: None,
        model_name: "tiny-ar".into(),
        backend: unmask_engine::run::BackendSpec::Cpu,
        prompt: "p".into(),
        settings: DecodeSettings::default(),
    };
    let run = store.start_run(new).await.unwrap().finish(RunOutcome::default()).await.unwrap();
    assert!(store.run_speculation(run.id).await.unwrap().is_none());
    let a = RunSpeculation { draft_model: "tiny-draft".into(), stats: serde_json::json!({"drafted": 9, "accepted": 4}) };
    store.put_run_speculation(run.id, &a).await.unwrap();
    assert_eq!(store.run_speculation(run.id).await.unwrap(), Some(a));
    let b = RunSpeculation { draft_model: "other".into(), stats: serde_json::json!({"drafted": 1}) };
    store.put_run_speculation(run.id, &b).await.unwrap();
    assert_eq!(store.run_speculation(run.id).await.unwrap(), Some(b.clone()));
    assert!(store.put_run_speculation(run.id + 100, &b).await.is_err(), "no such run");
    store.delete_run(run.id).await.unwrap();
    assert!(store.run_speculation(run.id).await.unwrap().is_none());
}

#[tokio::test]
async fn open_sets_wal_foreign_keys_busy_timeout_and_reopens() {
    let data = tempfile::tempdir().unwrap();
    let store = Store::open(data.path().join("nested/dir")).await.unwrap();
    assert!(store.database_path().exists());
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode").fetch_one(store.pool()).await.unwrap();
    assert_eq!(mode, "wal");
    let fk: i64 = sqlx::query_scalar("PRAGMA foreign_keys").fetch_one(store.pool()).await.unwrap();
    assert_eq!(fk, 1);
    let busy: i64 = sqlx::query_scalar("PRAGMA busy_timeout").fetch_one(store.pool()).await.unwrap();
    assert_eq!(busy, unmask_store::BUSY_TIMEOUT.as_millis() as i64);
    store.create_preset(&NewPreset { name: "kept".into(), ..Default::default() }).await.unwrap();
    store.close().await;
    let again = Store::open(data.path().join("nested/dir")).await.unwrap();
    assert_eq!(again.list_presets().await.unwrap().len(), 1);
    again.integrity_check().await.unwrap();
}

#[test]
fn data_dir_follows_the_environment_override() {
    // Only this test touches the variable in this test binary.
    let dir = tempfile::tempdir().unwrap();
    std::env::set_var(unmask_store::DATA_DIR_ENV, dir.path());
    assert_eq!(unmask_store::default_data_dir().unwrap(), dir.path());
    std::env::remove_var(unmask_store::DATA_DIR_ENV);
    let d = unmask_store::default_data_dir();
    #[cfg(target_os = "linux")]
    {
        let d = d.unwrap();
        assert!(d.ends_with("unmask"), "{}", d.display());
        match std::env::var_os("XDG_DATA_HOME").filter(|x| !x.is_empty()) {
            Some(x) => assert_eq!(d, Path::new(&x).join("unmask")),
            None => assert!(d.ends_with(".local/share/unmask"), "{}", d.display()),
        }
    }
    let _ = d;
}

/// The app runs these in async Tauri commands, which need `Send` futures and a shareable store.
#[allow(dead_code)]
fn public_futures_are_send(store: &Store, cancel: &unmask_store::CancellationToken) {
    fn send<T: Send>(_: &T) {}
    fn send_sync<T: Send + Sync + Clone + 'static>() {}
    send_sync::<Store>();
    let req = unmask_store::DownloadRequest::hf("a/b", "main");
    let cfg = unmask_store::DownloadConfig::default();
    send(&store.download_model(&req, &cfg, cancel, &mut |_| {}));
    send(&store.import_model_with(Path::new("x"), &ImportOptions::default(), &mut |_| {}));
    send(&store.start_run(NewRun {
        model_id: None,
        model_name: String::new(),
        backend: unmask_engine::run::BackendSpec::Cpu,
        prompt: String::new(),
        settings: DecodeSettings::default(),
    }));
    send(&store.recent_runs(10, 0));
    send(&store.compare_runs(1, 2));
    fn recorder_is_send(r: unmask_store::RunRecorder) -> impl Send {
        r
    }
    let _ = recorder_is_send;
}
