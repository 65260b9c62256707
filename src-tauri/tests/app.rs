//! Command logic end to end on the embedded model, without a window: generation with streamed
//! events, persistence across a reopen, regenerate/stop, presets, imports, runs and Perfetto.

use std::sync::{Arc, Mutex};

use unmask_app_lib::dto::*;
use unmask_app_lib::sink::{CollectSink, EventSink};
use unmask_app_lib::{AppErrorKind, AppState};

fn settings() -> DecodeSettings {
    DecodeSettings { gen_length: 32, block_length: 16, steps: 32, ..DecodeSettings::default() }
}

fn request(prompt: &str) -> GenerateRequest {
    GenerateRequest {
        conversation_id: None,
        model_id: None,
        prompt: prompt.into(),
        settings: settings(),
        overridden: None,
        backend: BackendChoice::cpu(),
        replace_from_message_id: None,
        system_prompt: None,
        draft_model_id: None,
    }
}

fn frames_of(events: &[GenerateEvent]) -> Vec<FrameDelta> {
    events
        .iter()
        .filter_map(|e| match e {
            GenerateEvent::Frames { frames } => Some(frames.clone()),
            _ => None,
        })
        .flatten()
        .collect()
}

/// Checks the event protocol: started, then frames, then finished (nothing after it).
fn check_protocol(events: &[GenerateEvent], summary: &RunSummary) {
    assert!(
        matches!(events.first(), Some(GenerateEvent::Started { run_id, .. }) if *run_id == summary.id),
        "{:?}",
        events.first()
    );
    match events.last() {
        Some(GenerateEvent::Finished { summary: s }) => assert_eq!(s, summary),
        other => panic!("last event {other:?}"),
    }
    let middle = &events[1..events.len() - 1];
    assert!(!middle.is_empty());
    assert!(middle.iter().all(|e| matches!(e, GenerateEvent::Frames { frames } if !frames.is_empty())));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_launch_registers_the_embedded_model_and_built_in_presets() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = AppState::open(dir.path()).await.expect("open");
    let models = state.list_models().await.expect("models");
    assert_eq!(models.len(), 1, "{models:?}");
    let m = &models[0];
    assert!(m.embedded && m.fits_memory, "{m:?}");
    assert_eq!(m.name, "tiny-llada");
    let info = state.app_info().await.expect("info");
    assert_eq!(info.default_model_id, Some(m.id));
    assert!(info.devices.iter().any(|d| d == "sm8750"), "{:?}", info.devices);
    assert!(info.memory_bytes > 0 && info.threads > 0);
    let presets = state.list_presets().await.expect("presets");
    assert_eq!(presets.iter().filter(|p| p.builtin).count(), 3, "{presets:?}");
    // The UI starts with the first preset: it must be the reference decoder, not a faster approximation.
    assert!(
        presets[0].builtin && presets[0].settings.threshold.is_none() && !presets[0].settings.speculative,
        "{presets:?}"
    );
    assert_eq!(presets[0].settings.cache, unmask_engine::decode::CacheMode::None, "{presets:?}");
    let spec = presets.iter().find(|p| p.settings.speculative).expect("speculative preset");
    assert!(spec.settings.revision);
    assert_eq!(spec.backend, BackendChoice::vnpu("sm8750"));
    let err = state.delete_model(m.id).await.expect_err("embedded model stays");
    assert!(err.message.contains("embedded"), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generate_streams_frames_records_the_run_and_survives_a_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (run_id, conv_id, output, n_frames) = {
        let state = AppState::open(dir.path()).await.expect("open");
        let sink = CollectSink::<GenerateEvent>::default();
        let summary = state.generate(request("What is 2+3?"), Arc::new(sink.clone())).await.expect("generate");
        assert_eq!(summary.status, RunStatus::Completed);
        assert_eq!(summary.backend, "cpu");
        let events = sink.events();
        check_protocol(&events, &summary);
        let (conv_id, prompt_tokens, canvas) = match &events[0] {
            GenerateEvent::Started { conversation_id, prompt_tokens, canvas_length, .. } => {
                (*conversation_id, *prompt_tokens, *canvas_length)
            }
            _ => unreachable!(),
        };
        assert_eq!(canvas, prompt_tokens + 32);
        let frames = frames_of(&events);
        // Every step arrives once, in order, and the last one shows every block that ran fully
        // committed (decoding stops after a block that ends in EOS, as the CLI does).
        let steps: Vec<u32> = frames.iter().map(|f| f.step).collect();
        assert_eq!(steps, (0..frames.len() as u32).collect::<Vec<_>>());
        assert_eq!(frames.len() as u64, summary.steps);
        let committed = frames.last().map(|f| f.committed_total).unwrap_or(0);
        assert!(committed > 0 && committed <= 32 && committed % 16 == 0, "committed {committed}");
        for f in &frames {
            for c in &f.changes {
                assert!(c.pos >= prompt_tokens && c.pos < canvas, "{c:?}");
                assert_eq!(c.text.is_empty(), c.state == TokenState::Masked, "{c:?}");
            }
        }
        // Stop tokens are marked as the answer's end; the summary counts the answer up to and
        // including the first of them, never the padding after it.
        let mut last = std::collections::BTreeMap::new();
        for c in frames.iter().flat_map(|f| &f.changes) {
            last.insert(c.pos, c.clone());
        }
        let first_end =
            last.values().find(|c| c.end).map(|c| c.pos - prompt_tokens).expect("the answer ends in padding");
        assert!((0..first_end).all(|i| last.get(&(prompt_tokens + i)).is_some_and(|c| c.state != TokenState::Masked)));
        assert_eq!(summary.answer_tokens, Some(first_end + 1), "{summary:?}");
        let detail = state.get_conversation(conv_id).await.expect("conversation");
        let roles: Vec<Role> = detail.messages.iter().map(|m| m.role).collect();
        assert_eq!(roles, vec![Role::User, Role::Assistant]);
        assert_eq!(detail.messages[1].run_id, Some(summary.id));
        assert_eq!(detail.messages[1].content, summary.output);
        (summary.id, conv_id, summary.output, frames.len())
    };
    // Reopen: everything is still there, nothing registered twice.
    let state = AppState::open(dir.path()).await.expect("reopen");
    assert_eq!(state.list_models().await.expect("models").len(), 1);
    assert_eq!(state.list_presets().await.expect("presets").len(), 3);
    let convs = state.list_conversations().await.expect("conversations");
    assert_eq!(convs.len(), 1);
    assert_eq!(convs[0].id, conv_id);
    assert_eq!(convs[0].title, "What is 2+3?");
    let run = state.get_run(run_id).await.expect("run");
    assert_eq!(run.summary.output, output);
    assert_eq!(run.frames.len(), n_frames);
    assert!(run.frames.iter().flat_map(|f| &f.changes).any(|c| c.end), "stored frames keep the end marks");
    assert_eq!(run.canvas_length, run.prompt_tokens + 32);
    let tl = run.timeline.expect("CPU runs get a measured timeline");
    assert!(!tl.simulated);
    assert_eq!(tl.events.len(), n_frames);
    let runs = state.list_runs(None, 10).await.expect("runs");
    assert_eq!(runs.len(), 1);
    let model_id = state.embedded_model_id.expect("embedded");
    assert_eq!(state.model_runs(model_id).await.expect("model runs").len(), 1);
    assert_eq!(state.list_models().await.expect("models")[0].run_count, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn speculative_revision_on_the_virtual_npu_stores_a_simulated_timeline() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = AppState::open(dir.path()).await.expect("open");
    let mut req = request("Sort: pear apple fig");
    req.settings.speculative = true;
    req.settings.revision = true;
    req.backend = BackendChoice::vnpu("sm8750");
    let sink = CollectSink::<GenerateEvent>::default();
    let summary = state.generate(req, Arc::new(sink.clone())).await.expect("generate");
    check_protocol(&sink.events(), &summary);
    assert_eq!(summary.backend, "vnpu:sm8750");
    assert!(summary.simulated_s.is_some_and(|s| s > 0.0), "{summary:?}");
    assert!(summary.energy_j.is_some_and(|e| e > 0.0), "{summary:?}");
    let detail = state.get_run(summary.id).await.expect("run");
    let tl = detail.timeline.expect("timeline");
    assert!(tl.simulated);
    let kinds: Vec<LaneKind> = tl.lanes.iter().map(|l| l.kind).collect();
    assert!(kinds.contains(&LaneKind::Npu), "{kinds:?}");
    assert!(tl.events.iter().all(|e| tl.lanes.iter().any(|l| l.id == e.lane)));
    assert_eq!(tl.energy_j, summary.energy_j.map(|e| (e * 1e3) / 1e3));
    assert!(tl.peak_resident_bytes.is_some_and(|b| b > 0));
    let json = state.perfetto_json(summary.id).await.expect("perfetto");
    let v: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    let evs = v["traceEvents"].as_array().expect("traceEvents");
    assert!(evs.iter().any(|e| e["ph"] == "X"));
    let path = dir.path().join("trace.json");
    let n = state.export_perfetto(summary.id, &path).await.expect("export");
    assert_eq!(n, std::fs::metadata(&path).expect("file").len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regenerate_replaces_the_turn_and_compare_shows_both_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = AppState::open(dir.path()).await.expect("open");
    let sink = Arc::new(CollectSink::<GenerateEvent>::default());
    let first = state.generate(request("Name a fruit."), sink.clone()).await.expect("first");
    let conv = state.list_conversations().await.expect("convs")[0].id;
    let user_msg = state.get_conversation(conv).await.expect("conv").messages[0].id;
    let mut again = request("Name a colour.");
    again.conversation_id = Some(conv);
    again.replace_from_message_id = Some(user_msg);
    again.settings.threshold = Some(0.9);
    let second = state.generate(again, sink).await.expect("regenerate");
    let msgs = state.get_conversation(conv).await.expect("conv").messages;
    assert_eq!(msgs.len(), 2, "{msgs:?}");
    assert_eq!(msgs[0].content, "Name a colour.");
    assert_eq!(msgs[1].run_id, Some(second.id));
    let cmp = state.compare_runs(&[first.id, second.id]).await.expect("compare");
    assert_eq!(cmp.len(), 2);
    assert_eq!(cmp[1].summary.settings.threshold, Some(0.9));
    assert!(state.compare_runs(&[first.id]).await.is_err());
    // A message of another conversation is refused.
    let mut bad = request("x");
    bad.conversation_id = Some(conv);
    bad.replace_from_message_id = Some(999_999);
    let err = state.generate(bad, Arc::new(CollectSink::default())).await.expect_err("foreign message");
    assert_eq!(err.kind, AppErrorKind::Invalid);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_conversation_keeps_answering_with_its_oldest_turns_left_out_of_the_prompt() {
    // Twelve turns overflow the embedded model's 256-token context: each turn still runs, on the
    // newest turns that fit, and every message stays stored.
    let dir = tempfile::tempdir().expect("tempdir");
    let state = AppState::open(dir.path()).await.expect("open");
    let mut conv = None;
    let mut last_prompt_tokens = 0;
    for turn in 0..12 {
        let mut req = request("Please tell me: what is 512+389?");
        req.conversation_id = conv;
        let sink = Arc::new(CollectSink::<GenerateEvent>::default());
        state.generate(req, sink.clone()).await.unwrap_or_else(|e| panic!("turn {}: {}", turn + 1, e.message));
        let events = sink.events();
        match events.first() {
            Some(GenerateEvent::Started { conversation_id, prompt_tokens, canvas_length, .. }) => {
                conv = Some(*conversation_id);
                last_prompt_tokens = *prompt_tokens;
                // The canvas is the prompt and the tokens to generate.
                assert!(
                    *canvas_length <= 256,
                    "turn {}: {prompt_tokens} prompt tokens, canvas {canvas_length}",
                    turn + 1
                );
            }
            other => panic!("turn {}: first event {other:?}", turn + 1),
        }
    }
    let msgs = state.get_conversation(conv.expect("a conversation")).await.expect("conv").messages;
    assert_eq!(msgs.len(), 24, "every message stored");
    assert!(last_prompt_tokens > 0);
}

/// Stops the run as soon as it starts.
struct StopOnStart {
    state: Arc<AppState>,
    events: Mutex<Vec<GenerateEvent>>,
}

impl EventSink<GenerateEvent> for StopOnStart {
    fn send(&self, event: GenerateEvent) -> Result<(), String> {
        if let GenerateEvent::Started { run_id, .. } = &event {
            self.state.stop_generation(*run_id).map_err(|e| e.message)?;
        }
        self.events.lock().map_err(|_| "poisoned")?.push(event);
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_generation_ends_the_run_as_cancelled() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = AppState::open(dir.path()).await.expect("open");
    let sink = Arc::new(StopOnStart { state: state.clone(), events: Mutex::new(Vec::new()) });
    let summary = state.generate(request("Count to ten."), sink.clone()).await.expect("resolves");
    assert_eq!(summary.status, RunStatus::Cancelled);
    let events = sink.events.lock().expect("events").clone();
    assert!(matches!(events.last(), Some(GenerateEvent::Finished { summary: s }) if s.status == RunStatus::Cancelled));
    assert!(state.stop_generation(summary.id).is_err(), "no longer running");
    assert_eq!(state.get_run(summary.id).await.expect("run").summary.status, RunStatus::Cancelled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_give_clear_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = AppState::open(dir.path()).await.expect("open");
    let missing = dir.path().join("no-such-model");
    let err = state.import_model(missing.to_str().expect("utf8"), None).await.expect_err("missing path");
    assert_eq!(err.kind, AppErrorKind::NotFound);
    assert!(err.message.contains("no-such-model"), "{err:?}");
    let not_a_model = dir.path().join("empty");
    std::fs::create_dir_all(&not_a_model).expect("mkdir");
    std::fs::write(not_a_model.join("readme.txt"), "hello").expect("write");
    let err = state.import_model(not_a_model.to_str().expect("utf8"), None).await.expect_err("not a model");
    assert!(!err.message.is_empty() && err.kind != AppErrorKind::Internal, "{err:?}");
    assert_eq!(state.list_models().await.expect("models").len(), 1);

    let sink = CollectSink::<GenerateEvent>::default();
    let mut req = request("hi");
    req.settings.gen_length = 30; // not a multiple of the block length
    let err = state.generate(req, Arc::new(sink.clone())).await.expect_err("bad settings");
    assert_eq!(err.kind, AppErrorKind::InvalidSettings);
    assert!(matches!(sink.events().last(), Some(GenerateEvent::Failed { message }) if *message == err.message));
    let mut req = request("hi");
    req.backend = BackendChoice::vnpu("no-such-phone");
    let err = state.generate(req, Arc::new(CollectSink::default())).await.expect_err("bad device");
    assert!(err.message.contains("no-such-phone"), "{err:?}");
    assert!(state.get_run(424242).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presets_crud_and_rerun_with_presets() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = AppState::open(dir.path()).await.expect("open");
    let mut s = settings();
    s.threshold = Some(0.8);
    let p = state.save_preset("mine", &s, &BackendChoice::cpu()).await.expect("save");
    assert!(!p.builtin);
    assert_eq!(p.settings, s);
    // Same name again updates it.
    s.seed = 3;
    let p2 = state.save_preset("mine", &s, &BackendChoice::vnpu("sm8650")).await.expect("update");
    assert_eq!(p2.id, p.id);
    assert_eq!(p2.backend, BackendChoice::vnpu("sm8650"));
    let builtin = state.list_presets().await.expect("list").into_iter().find(|p| p.builtin).expect("builtin");
    assert!(state.delete_preset(builtin.id).await.is_err());
    assert!(state.save_preset(&builtin.name, &s, &BackendChoice::cpu()).await.is_err());
    let runs = state.rerun_with_presets("What is 1+1?", None, &[builtin.id, p.id]).await.expect("rerun");
    assert_eq!(runs.len(), 2);
    assert!(runs.iter().all(|r| r.status == RunStatus::Completed && r.prompt == "What is 1+1?"));
    assert_eq!(runs[1].backend, "vnpu:sm8650");
    assert!(state.list_conversations().await.expect("convs").is_empty(), "re-runs are not chats");
    state.delete_preset(p.id).await.expect("delete");
    assert_eq!(state.list_presets().await.expect("list").len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presets_stored_with_older_spellings_still_load() {
    use unmask_engine::decode::{CacheMode, DreamAlg, Remasking};
    use unmask_engine::moe::MoePolicy;
    let dir = tempfile::tempdir().expect("tempdir");
    let state = AppState::open(dir.path()).await.expect("open");
    // Settings rows as older builds left them: snake_case choices (before the spellings were
    // unified) and the camelCase ones of older app builds.
    let rows = [
        (
            "old snake",
            r#"{"gen_length":32,"block_length":16,"steps":32,"remasking":"low_confidence","cache":"prefix","alg":"topk_margin"}"#,
        ),
        (
            "old camel",
            r#"{"gen_length":32,"block_length":16,"steps":32,"remasking":"lowConfidence","cache":"dual","alg":"maskgitPlus","moe":{"policy":"staticTiers"}}"#,
        ),
    ];
    for (name, json) in rows {
        sqlx::query(
            "INSERT INTO presets (name, description, settings_json, system_prompt, backend, created_at, updated_at)
             VALUES (?, '', ?, NULL, 'cpu', 0, 0)",
        )
        .bind(name)
        .bind(json)
        .execute(state.store.pool())
        .await
        .expect("insert");
    }
    let presets = state.list_presets().await.expect("presets");
    let by =
        |n: &str| presets.iter().find(|p| p.name == n).unwrap_or_else(|| panic!("{n}: {presets:?}")).settings.clone();
    let snake = by("old snake");
    assert_eq!(
        (snake.remasking, snake.cache, snake.algorithm),
        (Remasking::LowConfidence, CacheMode::Prefix, Some(DreamAlg::TopkMargin))
    );
    let camel = by("old camel");
    assert_eq!(
        (camel.cache, camel.algorithm, camel.moe),
        (CacheMode::Dual, Some(DreamAlg::MaskgitPlus), MoePolicy::StaticTiers)
    );
    // What the UI gets is the one spelling.
    let v = serde_json::to_value(&camel).expect("json");
    assert_eq!(
        (v["remasking"].as_str(), v["algorithm"].as_str(), v["moe"].as_str()),
        (Some("low-confidence"), Some("maskgit-plus"), Some("static-tiers"))
    );
}

fn prompt_tokens(events: &[GenerateEvent]) -> u32 {
    match events.first() {
        Some(GenerateEvent::Started { prompt_tokens, .. }) => *prompt_tokens,
        other => panic!("first event {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn system_prompt_rename_and_search_of_conversations() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = AppState::open(dir.path()).await.expect("open");
    // The same question without and with a system prompt: the system turn reaches the rendered
    // prompt (more prompt tokens) and is saved with the new conversation.
    let plain = CollectSink::<GenerateEvent>::default();
    state.generate(request("What is 2+3?"), Arc::new(plain.clone())).await.expect("plain");
    let with_system = CollectSink::<GenerateEvent>::default();
    let mut req = request("What is 2+3?");
    req.system_prompt = Some("  Answer with a number only.  ".into());
    state.generate(req, Arc::new(with_system.clone())).await.expect("with system prompt");
    let extra = prompt_tokens(&with_system.events()) - prompt_tokens(&plain.events());
    assert!(extra >= 5, "the system turn adds its tokens to the prompt (+{extra})");
    let convs = state.list_conversations().await.expect("convs");
    assert_eq!(convs.len(), 2);
    let sys = convs.iter().find(|c| c.system_prompt.is_some()).expect("conversation with a system prompt");
    assert_eq!(sys.system_prompt.as_deref(), Some("Answer with a number only."));

    // A later turn without `system_prompt` keeps the stored one (the prompt grows by a turn, not
    // by losing the system turn); a blank one clears it.
    let again = CollectSink::<GenerateEvent>::default();
    let mut next = request("And 4+4?");
    next.conversation_id = Some(sys.id);
    state.generate(next.clone(), Arc::new(again.clone())).await.expect("second turn");
    assert!(prompt_tokens(&again.events()) > prompt_tokens(&with_system.events()));
    assert!(state.get_conversation(sys.id).await.expect("conv").conversation.system_prompt.is_some());
    let cleared = state.set_system_prompt(sys.id, Some("  ")).await.expect("clear");
    assert_eq!(cleared.system_prompt, None);
    let set = state.set_system_prompt(sys.id, Some("Be brief.")).await.expect("set");
    assert_eq!(set.system_prompt.as_deref(), Some("Be brief."));
    next.system_prompt = Some(String::new());
    state.generate(next, Arc::new(CollectSink::<GenerateEvent>::default())).await.expect("third turn");
    assert_eq!(state.get_conversation(sys.id).await.expect("conv").conversation.system_prompt, None);

    // Rename: one trimmed line; empty titles and unknown ids are refused.
    let renamed = state.rename_conversation(sys.id, "  Sums\n with rules ").await.expect("rename");
    assert_eq!(renamed.title, "Sums with rules");
    assert_eq!(state.get_conversation(sys.id).await.expect("conv").conversation.title, "Sums with rules");
    assert_eq!(state.rename_conversation(sys.id, " \n").await.expect_err("empty").kind, AppErrorKind::Invalid);
    assert_eq!(state.rename_conversation(999_999, "x").await.expect_err("unknown").kind, AppErrorKind::NotFound);
    assert_eq!(state.set_system_prompt(999_999, None).await.expect_err("unknown").kind, AppErrorKind::NotFound);

    // Search: titles and message text, case-insensitive; blank lists everything.
    let ids = |cs: Vec<Conversation>| cs.into_iter().map(|c| c.id).collect::<Vec<_>>();
    assert_eq!(ids(state.search_conversations("SUMS").await.expect("title")), [sys.id]);
    assert_eq!(ids(state.search_conversations("4+4").await.expect("message")), [sys.id]);
    assert_eq!(state.search_conversations("2+3").await.expect("both").len(), 2);
    assert!(state.search_conversations("no such words").await.expect("none").is_empty());
    assert_eq!(state.search_conversations("  ").await.expect("blank").len(), 2);
}

/// The settings form starts from a model's own defaults and sends only what the user changed: a
/// model's `generation_config.json` decides every knob the user left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_models_generation_config_fills_what_the_user_did_not_choose() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = AppState::open(dir.path()).await.expect("open");
    let entry = state.list_models().await.expect("models").into_iter().find(|m| m.embedded).expect("embedded");
    // The embedded model's generation_config.json: 32 tokens in blocks of 4, 32 steps.
    let shipped = entry.default_settings.clone().expect("default settings");
    assert_eq!((shipped.gen_length, shipped.block_length, shipped.steps), (32, 4, 32), "{shipped:?}");

    // What the form shows: values the model's defaults never say.
    let form = DecodeSettings { gen_length: 64, block_length: 16, steps: 8, ..DecodeSettings::default() };
    let run = |overridden: Option<Vec<SettingKey>>| {
        let (state, form) = (&state, form.clone());
        async move {
            let req =
                GenerateRequest { model_id: Some(entry.id), settings: form, overridden, ..request("Reverse: a b c") };
            let sink = CollectSink::<GenerateEvent>::default();
            state.generate(req, Arc::new(sink)).await.expect("generate").settings
        }
    };
    // Nothing chosen: the model's defaults, whatever the form showed.
    let s = run(Some(vec![])).await;
    assert_eq!((s.gen_length, s.block_length, s.steps), (32, 4, 32), "{s:?}");
    // Only the length chosen: the model's step density (one step per token) and block length stay.
    let s = run(Some(vec![SettingKey::GenLength])).await;
    assert_eq!((s.gen_length, s.block_length, s.steps), (64, 4, 64), "{s:?}");
    // A preset (every knob chosen): exactly the form's values.
    let s = run(None).await;
    assert_eq!((s.gen_length, s.block_length, s.steps), (64, 16, 8), "{s:?}");
}

/// An autoregressive model with a draft model: the answer is the model's own (token for token),
/// the run keeps how the drafts fared, accepted drafts are marked in the streamed frames, and a
/// draft that cannot pair is refused before anything is recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draft_model_speeds_an_autoregressive_model_without_changing_its_answer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = AppState::open(dir.path()).await.expect("open");
    let models = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../models");
    let import = |name: &str| {
        let path = models.join(name);
        let state = &state;
        async move { state.import_model(path.to_str().expect("utf8"), None).await.expect("import") }
    };
    let (target, draft) = (import("tiny-ar").await, import("tiny-draft").await);
    let dllm = state.list_models().await.expect("models").into_iter().find(|m| m.embedded).expect("embedded");
    let run = |draft_model_id: Option<i64>, model_id: i64| {
        let state = &state;
        async move {
            let sink = CollectSink::<GenerateEvent>::default();
            let req =
                GenerateRequest { model_id: Some(model_id), draft_model_id, ..request("Reverse: pear apple fig") };
            let result = state.generate(req, Arc::new(sink.clone())).await;
            (result, sink.events())
        }
    };
    let (plain, _) = run(None, target.id).await;
    let plain = plain.expect("plain run");
    assert!(plain.speculation.is_none());
    let (spec, events) = run(Some(draft.id), target.id).await;
    let spec = spec.expect("speculative run");
    assert_eq!(spec.output, plain.output, "speculative decoding must not change the answer");
    let sp = spec.speculation.clone().expect("speculation counters");
    assert_eq!(sp.draft_model, draft.name);
    assert!(sp.drafted > 0 && sp.judged <= sp.drafted && sp.accepted + sp.rejected == sp.judged, "{sp:?}");
    assert!(sp.verify_forwards > 0 && sp.draft_forwards > 0, "{sp:?}");
    // Accepted drafts reach the live view marked as drafts.
    let marked = frames_of(&events).iter().flat_map(|f| f.changes.clone()).filter(|t| t.speculative).count() as u64;
    assert_eq!(marked, sp.accepted, "one mark per accepted draft");
    // Refused drafts reach it too, with their text, beside the token the target wrote instead;
    // the stored run replays the same marks.
    let refused = |frames: &[FrameDelta]| -> Vec<(u32, String, String)> {
        let changes = frames.iter().flat_map(|f| f.changes.iter());
        changes.filter_map(|t| t.rejected_draft.clone().map(|d| (t.pos, d, t.text.clone()))).collect()
    };
    let live = refused(&frames_of(&events));
    // At most one refusal per verification (the drafts after it are never judged).
    assert!(live.len() as u64 <= sp.rejected.min(sp.verify_forwards), "{live:?} vs {sp:?}");
    assert!(sp.rejected == 0 || !live.is_empty(), "{sp:?}");
    assert!(live.iter().all(|(_, draft, wrote)| draft != wrote), "{live:?}");
    // The stored run shows the same counters, and its profiler timeline the two tasks: a Drafter
    // lane with one slice per draft, a Verifier lane with one per verification, the queue depth.
    let detail = state.get_run(spec.id).await.expect("run");
    assert_eq!(detail.summary.speculation, Some(sp.clone()));
    assert_eq!(refused(&detail.frames), live, "the replay shows the refusals the live view showed");
    let tl = detail.timeline.expect("a measured timeline");
    assert!(!tl.simulated);
    let lanes: Vec<&str> = tl.lanes.iter().map(|l| l.label.as_str()).collect();
    assert_eq!(lanes, ["Verifier", "Drafter"]);
    let on = |lane: &str| tl.events.iter().filter(|e| e.lane == lane).count() as u64;
    assert_eq!(on("drafter"), sp.drafted, "one slice per draft");
    assert_eq!(on("verifier"), sp.verify_forwards, "one slice per verification");
    let depth = tl.counters.iter().find(|c| c.name == "draft_queue_depth").expect("queue depth counter");
    assert_eq!(depth.points.len() as u64, sp.verify_forwards);

    let runs_before = state.list_runs(None, 100).await.expect("runs").len();
    for (draft_id, model_id, says) in
        [(dllm.id, target.id, "must be autoregressive"), (draft.id, dllm.id, "for autoregressive models")]
    {
        let (err, _) = run(Some(draft_id), model_id).await;
        let err = err.expect_err("a draft that cannot pair");
        assert_eq!(err.kind, AppErrorKind::Invalid, "{err:?}");
        assert!(err.message.contains(says), "{err:?}");
    }
    assert_eq!(state.list_runs(None, 100).await.expect("runs").len(), runs_before, "refused before recording");
}
