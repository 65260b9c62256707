//! HTP performance votes through `deviceGetInfrastructure` → perf infrastructure:
//! a power-config id with DCVS/RPC settings, released (destroyed) on drop.

use crate::error::{check, QnnError, Result};
use crate::ffi::*;
use crate::handles::{Device, DeviceInner};
use crate::loader::qnn_fn;
use std::sync::Arc;

/// Power profile presets from the reference (mllm / Genie / QNN docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PowerProfile {
    /// DCVS off, PERFORMANCE mode, all corners MAX, sleep latency 40 µs, RPC polling 9999 µs.
    Burst,
    /// DCVS off, corners TURBO, sleep latency 100 µs, RPC polling.
    HighPerformance,
    /// DCVS on, corners NOM_PLUS, sleep latency 1000 µs, no polling.
    Balanced,
}

const VCORNER_TURBO: u32 = 0x80;
const VCORNER_NOM_PLUS: u32 = 0x70;
const POWER_MODE_ADJUST_UP_DOWN: u32 = 0x1;

impl PowerProfile {
    fn dcvs(self, id: u32) -> QnnHtpPerfInfrastructure_DcvsV3_t {
        let (dcvs_enable, mode, corner, sleep_latency) = match self {
            PowerProfile::Burst => (0, QNN_HTP_PERF_POWER_MODE_PERFORMANCE, QNN_HTP_PERF_VCORNER_MAX, 40),
            PowerProfile::HighPerformance => (0, QNN_HTP_PERF_POWER_MODE_PERFORMANCE, VCORNER_TURBO, 100),
            PowerProfile::Balanced => (1, POWER_MODE_ADJUST_UP_DOWN, VCORNER_NOM_PLUS, 1000),
        };
        QnnHtpPerfInfrastructure_DcvsV3_t {
            contextId: id,
            setDcvsEnable: 1,
            dcvsEnable: dcvs_enable,
            powerMode: mode,
            setSleepLatency: 1,
            sleepLatency: sleep_latency,
            setSleepDisable: 1,
            sleepDisable: u32::from(self != PowerProfile::Balanced),
            setBusParams: 1,
            busVoltageCornerMin: corner,
            busVoltageCornerTarget: corner,
            busVoltageCornerMax: corner,
            setCoreParams: 1,
            coreVoltageCornerMin: corner,
            coreVoltageCornerTarget: corner,
            coreVoltageCornerMax: corner,
        }
    }

    /// RPC polling time in µs, when the profile polls.
    fn polling_us(self) -> Option<u32> {
        match self {
            PowerProfile::Burst | PowerProfile::HighPerformance => Some(9999),
            PowerProfile::Balanced => None,
        }
    }
}

/// An active power vote; destroyed (vote released) on drop, before the device is freed.
pub struct PowerVote {
    // Held so the device outlives the vote.
    _device: Arc<DeviceInner>,
    id: u32,
    destroy: unsafe extern "C" fn(u32) -> Qnn_ErrorHandle_t,
}

impl Device {
    /// Applies a power profile (HTP only); keep the returned vote alive while running.
    pub fn set_power_profile(&self, profile: PowerProfile) -> Result<PowerVote> {
        let get = qnn_fn!(self.inner.backend.lib, deviceGetInfrastructure)?;
        let mut infra: *const QnnHtpDevice_Infrastructure_t = std::ptr::null();
        // SAFETY: out-pointer valid; the backend returns a pointer to its static infrastructure.
        check("deviceGetInfrastructure", unsafe { get(&mut infra) })?;
        if infra.is_null() {
            return Err(QnnError::MissingFunction("deviceGetInfrastructure (null result)"));
        }
        // SAFETY: non-null pointer to the HTP infrastructure struct, valid while the library is loaded.
        let infra = unsafe { *infra };
        if infra.infraType != 0 {
            return Err(QnnError::InvalidArgument(format!("unexpected infrastructure type {}", infra.infraType)));
        }
        let perf = infra.perfInfra;
        let create = perf.createPowerConfigId.ok_or(QnnError::MissingFunction("createPowerConfigId"))?;
        let set = perf.setPowerConfig.ok_or(QnnError::MissingFunction("setPowerConfig"))?;
        let destroy = perf.destroyPowerConfigId.ok_or(QnnError::MissingFunction("destroyPowerConfigId"))?;
        let mut id = 0u32;
        // SAFETY: device 0 / core 0 as in the reference bring-up; out-pointer valid.
        check("createPowerConfigId", unsafe { create(0, 0, &mut id) })?;
        let vote = PowerVote { _device: self.inner.clone(), id, destroy };
        let mut configs = vec![QnnHtpPerfInfrastructure_PowerConfig_t {
            option: QNN_HTP_PERF_POWER_CONFIG_OPTION_DCVS_V3,
            u: QnnHtpPerfInfrastructure_PowerConfigUnion_t { dcvsV3Config: profile.dcvs(id) },
        }];
        if let Some(poll) = profile.polling_us() {
            configs.push(QnnHtpPerfInfrastructure_PowerConfig_t {
                option: QNN_HTP_PERF_POWER_CONFIG_OPTION_RPC_CONTROL_LATENCY,
                u: QnnHtpPerfInfrastructure_PowerConfigUnion_t { rpcValue: 100 },
            });
            configs.push(QnnHtpPerfInfrastructure_PowerConfig_t {
                option: QNN_HTP_PERF_POWER_CONFIG_OPTION_RPC_POLLING_TIME,
                u: QnnHtpPerfInfrastructure_PowerConfigUnion_t { rpcValue: poll },
            });
        }
        let ptrs: Vec<*const QnnHtpPerfInfrastructure_PowerConfig_t> =
            configs.iter().map(|c| c as *const _).chain(std::iter::once(std::ptr::null())).collect();
        // SAFETY: NULL-terminated list of configs that outlive the call.
        check("setPowerConfig", unsafe { set(id, ptrs.as_ptr()) })?;
        Ok(vote)
    }
}

impl PowerVote {
    /// The power config id.
    pub fn id(&self) -> u32 {
        self.id
    }
}

impl Drop for PowerVote {
    fn drop(&mut self) {
        // SAFETY: id came from createPowerConfigId and is destroyed once; the device is still alive.
        let ret = unsafe { (self.destroy)(self.id) };
        if let Err(e) = check("destroyPowerConfigId", ret) {
            tracing::warn!("{e}");
        }
    }
}
