//! Soak of the app's state: 100 generations in one process (each a new conversation, recorded
//! in the store, streamed to a sink), resident memory flat after a warm-up.

use std::sync::Arc;

use unmask_app_lib::dto::{BackendChoice, DecodeSettings, GenerateRequest};
use unmask_app_lib::sink::CollectSink;
use unmask_app_lib::AppState;
use unmask_robustness::soak::{in_process_soak, soak_prompt};

#[test]
fn app_state_generations_keep_memory_flat() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let state = rt.block_on(AppState::open(dir.path())).expect("open");
    let settings = DecodeSettings { gen_length: 16, block_length: 16, steps: 4, ..DecodeSettings::default() };
    let report = in_process_soak("app_state_generate", 100, |i| {
        let req = GenerateRequest {
            conversation_id: None,
            model_id: None,
            prompt: soak_prompt(i),
            settings: settings.clone(),
            overridden: None,
            backend: BackendChoice::cpu(),
            replace_from_message_id: None,
            system_prompt: None,
            draft_model_id: None,
        };
        rt.block_on(state.generate(req, Arc::new(CollectSink::default()))).map(|_| ()).map_err(|e| e.message)
    });
    println!("{}", report.summary());
    assert!(report.error.is_none(), "{:?}", report.error);
    assert!(report.passed, "memory grows: {}", report.summary());
}
