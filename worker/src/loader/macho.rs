//! A structural check of a Mach-O dynamic library (macOS's plugins) before `dlopen` maps it: the
//! counterpart of [`super::elf`]. dyld maps a library's segments as its load commands describe
//! them; a truncated file is turned into a one-line error here instead of a fault there.
//!
//! Plain bytes: it runs (and is tested) on every platform.

/// 64-bit Mach-O, little-endian (`MH_MAGIC_64` as it lies in the file).
const MH_MAGIC_64: u32 = 0xfeed_facf;
/// A universal ("fat") file: several architectures, big-endian headers.
const FAT_MAGIC: u32 = 0xcafe_babe;
/// `MH_DYLIB` and `MH_BUNDLE`: what `dlopen` takes.
const MH_DYLIB: u32 = 6;
const MH_BUNDLE: u32 = 8;
/// `LC_SEGMENT_64`.
const LC_SEGMENT_64: u32 = 0x19;
/// The 64-bit header's size.
const HEADER: usize = 32;

/// The CPU type of this host (`CPU_TYPE_ARM64`, `CPU_TYPE_X86_64`).
pub const HOST_CPU: u32 = if cfg!(target_arch = "aarch64") {
    0x0100_000c
} else {
    0x0100_0007
};

/// Checks that `bytes` is a 64-bit Mach-O library or bundle for the CPU `cpu` (or a universal
/// file holding one) whose load commands and segments all lie within the file.
///
/// ```
/// use rho_worker::loader::macho::{HOST_CPU, check};
/// assert_eq!(check(b"\x7fELF", HOST_CPU).unwrap_err(), "not a Mach-O file (bad magic number)");
/// ```
pub fn check(bytes: &[u8], cpu: u32) -> Result<(), String> {
    let be = |at: usize| -> Result<u32, String> {
        bytes
            .get(at..at + 4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
            .ok_or_else(|| "the file ends inside its universal header".to_owned())
    };
    if bytes.len() >= 4 && be(0)? == FAT_MAGIC {
        let count = be(4)? as usize;
        for i in 0..count.min(64) {
            let at = 8 + i * 20;
            if be(at)? != cpu {
                continue;
            }
            let (offset, size) = (be(at + 8)? as usize, be(at + 12)? as usize);
            let slice = offset
                .checked_add(size)
                .and_then(|end| bytes.get(offset..end))
                .ok_or("the universal file's slice for this CPU lies past its end")?;
            return check_thin(slice, cpu);
        }
        return Err("a universal file without a slice for this CPU".into());
    }
    check_thin(bytes, cpu)
}

/// One architecture's Mach-O image.
fn check_thin(bytes: &[u8], cpu: u32) -> Result<(), String> {
    let le = |at: usize| -> Result<u32, String> {
        bytes
            .get(at..at + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .ok_or_else(|| format!("the file ends at byte {}, inside a header", bytes.len()))
    };
    let le64 = |at: usize| -> Result<u64, String> {
        Ok(u64::from(le(at)?) | u64::from(le(at + 4)?) << 32)
    };
    if bytes.len() < 4 || le(0)? != MH_MAGIC_64 {
        return Err("not a Mach-O file (bad magic number)".into());
    }
    if le(4)? != cpu {
        return Err(format!(
            "a library for CPU type {:#x}; this host is {cpu:#x}",
            le(4)?
        ));
    }
    let file_type = le(12)?;
    if file_type != MH_DYLIB && file_type != MH_BUNDLE {
        return Err(format!(
            "Mach-O file type {file_type} is not a dynamic library"
        ));
    }
    let commands = le(16)? as usize;
    let commands_size = le(20)? as usize;
    if HEADER.saturating_add(commands_size) > bytes.len() {
        return Err("its load commands lie past the end of the file".into());
    }
    let mut at = HEADER;
    for _ in 0..commands {
        let (kind, size) = (le(at)?, le(at + 4)? as usize);
        if size < 8 || at + size > HEADER + commands_size {
            return Err("a load command is malformed".into());
        }
        if kind == LC_SEGMENT_64 {
            let (offset, len) = (le64(at + 40)?, le64(at + 48)?);
            if offset
                .checked_add(len)
                .is_none_or(|end| end > bytes.len() as u64)
            {
                return Err("a segment lies past the end of the file (truncated?)".into());
            }
        }
        at += size;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ARM64: u32 = 0x0100_000c;

    /// A dylib header with one segment of `len` bytes at `offset`.
    fn dylib(cpu: u32, offset: u64, len: u64, file_len: usize) -> Vec<u8> {
        let mut bytes = Vec::new();
        for word in [MH_MAGIC_64, cpu, 0, MH_DYLIB, 1, 72, 0, 0] {
            bytes.extend(word.to_le_bytes());
        }
        bytes.extend(LC_SEGMENT_64.to_le_bytes());
        bytes.extend(72u32.to_le_bytes());
        bytes.extend([0u8; 16]); // segment name
        bytes.extend([0u8; 16]); // vmaddr, vmsize
        bytes.extend(offset.to_le_bytes());
        bytes.extend(len.to_le_bytes());
        bytes.extend([0u8; 16]); // protections, sections, flags
        bytes.resize(file_len, 0);
        bytes
    }

    #[test]
    fn a_whole_library_passes_and_a_truncated_one_is_named() {
        assert_eq!(check(&dylib(ARM64, 0, 4096, 4096), ARM64), Ok(()));
        let cut = check(&dylib(ARM64, 0, 4096, 2048), ARM64).unwrap_err();
        assert!(cut.contains("past the end"), "{cut}");
        let other = check(&dylib(0x0100_0007, 0, 4096, 4096), ARM64).unwrap_err();
        assert!(other.contains("CPU type 0x1000007"), "{other}");
        let short = check(&dylib(ARM64, 0, 16, 4096)[..40], ARM64).unwrap_err();
        assert!(short.contains("past the end"), "{short}");
    }

    #[test]
    fn a_universal_file_is_checked_by_its_slice_for_this_cpu() {
        let thin = dylib(ARM64, 0, 4096, 4096);
        let mut fat = Vec::new();
        for word in [FAT_MAGIC, 1, ARM64, 0, 4096, thin.len() as u32, 12] {
            fat.extend(word.to_be_bytes());
        }
        fat.resize(4096, 0);
        fat.extend(&thin);
        assert_eq!(check(&fat, ARM64), Ok(()));
        let none = check(&fat, 0x0100_0007).unwrap_err();
        assert!(none.contains("without a slice"), "{none}");
        let cut = check(&fat[..6000], ARM64).unwrap_err();
        assert!(cut.contains("past its end"), "{cut}");
    }
}
