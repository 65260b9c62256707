//! What the host can give a request: memory the OS reports as available now.

/// Bytes the OS could hand this process without swapping (`MemAvailable` on Linux and Android);
/// `None` where the platform does not say, in which case requests are not refused on memory.
pub fn available_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_mem_available(&text)
}

fn parse_mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_mem_available() {
        let t = "MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   2048 kB\n";
        assert_eq!(super::parse_mem_available(t), Some(2048 * 1024));
        assert_eq!(super::parse_mem_available("MemTotal: 1 kB\n"), None);
    }
}
