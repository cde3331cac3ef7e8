//! A structural check of an ELF shared object before `dlopen` maps it.
//!
//! glibc maps a library's segments as its headers describe them; a truncated file whose segments
//! reach past its end is mapped anyway, and the first touch of the missing pages kills the whole
//! process with SIGBUS. Checking the headers against the file's length first turns a truncated or
//! garbled file into a one-line error.

/// Checks that `bytes` is a 64- or 32-bit little-endian ELF shared object for this machine whose
/// program headers, loadable segments and section headers all lie within the file.
pub fn check(bytes: &[u8]) -> Result<(), String> {
    if bytes.len() < 16 || &bytes[..4] != b"\x7fELF" {
        return Err("not an ELF file (bad magic number)".into());
    }
    let wide = match bytes[4] {
        1 => false,
        2 => true,
        other => return Err(format!("unknown ELF class {other}")),
    };
    if wide != cfg!(target_pointer_width = "64") {
        return Err(format!(
            "a {}-bit library; this host is {}-bit",
            if wide { 64 } else { 32 },
            usize::BITS
        ));
    }
    if bytes[5] != 1 {
        return Err("a big-endian library; this host is little-endian".into());
    }
    let r = Reader { bytes, wide };
    let e_type = r.u16(16)?;
    if e_type != 3 {
        return Err(format!("ELF type {e_type} is not a shared object"));
    }
    let (phoff, shoff, phentsize, phnum, shentsize, shnum) = if wide {
        (
            r.u64(32)?,
            r.u64(40)?,
            r.u16(54)?,
            r.u16(56)?,
            r.u16(58)?,
            r.u16(60)?,
        )
    } else {
        (
            r.u32(28)? as u64,
            r.u32(32)? as u64,
            r.u16(42)?,
            r.u16(44)?,
            r.u16(46)?,
            r.u16(48)?,
        )
    };
    let len = bytes.len() as u64;
    let table_end = |off: u64, size: u16, n: u16| off.checked_add(u64::from(size) * u64::from(n));
    match table_end(phoff, phentsize, phnum) {
        Some(end) if end <= len => {}
        _ => return Err(truncated(len)),
    }
    if shoff != 0 {
        match table_end(shoff, shentsize, shnum) {
            Some(end) if end <= len => {}
            _ => return Err(truncated(len)),
        }
    }
    for i in 0..u64::from(phnum) {
        let base = (phoff + i * u64::from(phentsize)) as usize;
        let p_type = r.u32(base)?;
        const PT_LOAD: u32 = 1;
        const PT_DYNAMIC: u32 = 2;
        if p_type != PT_LOAD && p_type != PT_DYNAMIC {
            continue;
        }
        let (offset, filesz) = if wide {
            (r.u64(base + 8)?, r.u64(base + 32)?)
        } else {
            (r.u32(base + 4)? as u64, r.u32(base + 16)? as u64)
        };
        match offset.checked_add(filesz) {
            Some(end) if end <= len => {}
            _ => return Err(truncated(len)),
        }
    }
    Ok(())
}

fn truncated(len: u64) -> String {
    format!("truncated: its headers describe data past its end ({len} bytes)")
}

struct Reader<'a> {
    bytes: &'a [u8],
    #[allow(dead_code)]
    wide: bool,
}

impl Reader<'_> {
    fn take<const N: usize>(&self, at: usize) -> Result<[u8; N], String> {
        self.bytes
            .get(at..at + N)
            .and_then(|s| s.try_into().ok())
            .ok_or_else(|| truncated(self.bytes.len() as u64))
    }
    fn u16(&self, at: usize) -> Result<u16, String> {
        self.take::<2>(at).map(u16::from_le_bytes)
    }
    fn u32(&self, at: usize) -> Result<u32, String> {
        self.take::<4>(at).map(u32::from_le_bytes)
    }
    fn u64(&self, at: usize) -> Result<u64, String> {
        self.take::<8>(at).map(u64::from_le_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_this_test_binary_and_truncations() {
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        // A test binary is a position-independent executable: ELF type 3 like a library.
        assert_eq!(check(&exe), Ok(()));
        assert!(
            check(&exe[..exe.len() / 2])
                .unwrap_err()
                .starts_with("truncated")
        );
        assert!(check(&exe[..100]).unwrap_err().starts_with("truncated"));
        assert_eq!(
            check(b"hello world, not elf"),
            Err("not an ELF file (bad magic number)".into())
        );
    }
}
