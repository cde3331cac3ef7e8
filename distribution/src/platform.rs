//! Which machine a plugin file is for ([`Platform`]), told by its bytes, never by its name alone:
//! an ELF shared object's machine, a Mach-O dynamic library's CPU, a WebAssembly component's
//! layer.

use std::fmt;

/// A platform a plugin file runs on. A wasm component runs on every host with components.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Platform {
    /// Linux on x86-64: an ELF64 shared object (`.so`), machine `EM_X86_64`.
    LinuxX86_64,
    /// Linux on 64-bit ARM: an ELF64 shared object (`.so`), machine `EM_AARCH64`.
    LinuxAarch64,
    /// macOS on x86-64: a Mach-O 64 dynamic library (`.dylib`), CPU `x86_64`.
    MacosX86_64,
    /// macOS on Apple silicon: a Mach-O 64 dynamic library (`.dylib`), CPU `arm64`.
    MacosAarch64,
    /// A WebAssembly component (`.wasm`, WASI preview 2): any host with components.
    Wasm,
}

/// Every platform, in the order artifacts list them.
pub const ALL: [Platform; 5] = [
    Platform::LinuxX86_64,
    Platform::LinuxAarch64,
    Platform::MacosX86_64,
    Platform::MacosAarch64,
    Platform::Wasm,
];

impl Platform {
    /// Its name in artifacts and messages: `linux-x86_64`, `linux-aarch64`, `macos-x86_64`,
    /// `macos-aarch64`, `wasm32-wasip2`.
    pub fn as_str(self) -> &'static str {
        match self {
            Platform::LinuxX86_64 => "linux-x86_64",
            Platform::LinuxAarch64 => "linux-aarch64",
            Platform::MacosX86_64 => "macos-x86_64",
            Platform::MacosAarch64 => "macos-aarch64",
            Platform::Wasm => "wasm32-wasip2",
        }
    }

    /// The platform named `name` ([`as_str`](Self::as_str)'s names).
    pub fn parse(name: &str) -> Option<Platform> {
        ALL.into_iter().find(|p| p.as_str() == name)
    }

    /// The suffix its files carry: `.so`, `.dylib`, `.wasm`.
    pub fn suffix(self) -> &'static str {
        match self {
            Platform::LinuxX86_64 | Platform::LinuxAarch64 => ".so",
            Platform::MacosX86_64 | Platform::MacosAarch64 => ".dylib",
            Platform::Wasm => ".wasm",
        }
    }

    /// The native platform this program was built for, if plugins can be native there.
    pub fn native() -> Option<Platform> {
        match (std::env::consts::OS, std::env::consts::ARCH) {
            ("linux", "x86_64") => Some(Platform::LinuxX86_64),
            ("linux", "aarch64") => Some(Platform::LinuxAarch64),
            ("macos", "x86_64") => Some(Platform::MacosX86_64),
            ("macos", "aarch64") => Some(Platform::MacosAarch64),
            _ => None,
        }
    }

    /// The platform `bytes` are a plugin file for: `Err` says what they are instead (a core
    /// wasm module, an executable, a 32-bit library, a universal binary, not a library at all).
    pub fn of_bytes(bytes: &[u8]) -> Result<Platform, String> {
        let u16_le = |at: usize| {
            bytes
                .get(at..at + 2)
                .map(|b| u16::from_le_bytes([b[0], b[1]]))
        };
        let u32_le = |at: usize| {
            bytes
                .get(at..at + 4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        };
        if bytes.starts_with(b"\x7fELF") {
            if bytes.get(4) != Some(&2) || bytes.get(5) != Some(&1) {
                return Err("an ELF file that is not 64-bit little-endian".into());
            }
            if u16_le(16) != Some(3) {
                return Err("an ELF file that is not a shared object".into());
            }
            return match u16_le(18) {
                Some(0x3e) => Ok(Platform::LinuxX86_64),
                Some(0xb7) => Ok(Platform::LinuxAarch64),
                other => Err(format!(
                    "an ELF shared object for machine {}",
                    other.map_or("?".into(), |m| format!("{m:#x}"))
                )),
            };
        }
        if bytes.starts_with(&[0xcf, 0xfa, 0xed, 0xfe]) {
            if !matches!(u32_le(12), Some(6 | 8)) {
                return Err("a Mach-O file that is not a dynamic library or bundle".into());
            }
            return match u32_le(4) {
                Some(0x0100_0007) => Ok(Platform::MacosX86_64),
                Some(0x0100_000c) => Ok(Platform::MacosAarch64),
                other => Err(format!(
                    "a Mach-O library for CPU {}",
                    other.map_or("?".into(), |c| format!("{c:#x}"))
                )),
            };
        }
        if bytes.starts_with(&[0xca, 0xfe, 0xba, 0xbe])
            || bytes.starts_with(&[0xbe, 0xba, 0xfe, 0xca])
        {
            return Err(
                "a universal (fat) Mach-O file: publish each architecture's library".into(),
            );
        }
        if bytes.starts_with(b"\0asm") {
            return match bytes.get(4..8) {
                Some([0x0d, 0x00, 0x01, 0x00]) => Ok(Platform::Wasm),
                Some([0x01, 0x00, 0x00, 0x00]) => {
                    Err("a core WebAssembly module, not a component (wasm32-wasip2)".into())
                }
                _ => Err("a WebAssembly file of an unknown version".into()),
            };
        }
        Err("neither a shared library (ELF, Mach-O) nor a WebAssembly component".into())
    }
}

impl fmt::Display for Platform {
    /// [`as_str`](Self::as_str).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn elf(machine: u16, kind: u16) -> Vec<u8> {
        let mut bytes = vec![0u8; 64];
        bytes[..4].copy_from_slice(b"\x7fELF");
        bytes[4] = 2;
        bytes[5] = 1;
        bytes[16..18].copy_from_slice(&kind.to_le_bytes());
        bytes[18..20].copy_from_slice(&machine.to_le_bytes());
        bytes
    }

    fn macho(cpu: u32, kind: u32) -> Vec<u8> {
        let mut bytes = vec![0u8; 32];
        bytes[..4].copy_from_slice(&[0xcf, 0xfa, 0xed, 0xfe]);
        bytes[4..8].copy_from_slice(&cpu.to_le_bytes());
        bytes[12..16].copy_from_slice(&kind.to_le_bytes());
        bytes
    }

    #[test]
    fn files_are_told_by_their_bytes() {
        assert_eq!(Platform::of_bytes(&elf(0x3e, 3)), Ok(Platform::LinuxX86_64));
        assert_eq!(
            Platform::of_bytes(&elf(0xb7, 3)),
            Ok(Platform::LinuxAarch64)
        );
        assert!(Platform::of_bytes(&elf(0x3e, 2)).is_err(), "an executable");
        assert!(Platform::of_bytes(&elf(0x28, 3)).is_err(), "32-bit ARM");
        assert_eq!(
            Platform::of_bytes(&macho(0x0100_000c, 6)),
            Ok(Platform::MacosAarch64)
        );
        assert_eq!(
            Platform::of_bytes(&macho(0x0100_0007, 6)),
            Ok(Platform::MacosX86_64)
        );
        assert!(Platform::of_bytes(&macho(0x0100_0007, 2)).is_err());
        assert_eq!(
            Platform::of_bytes(b"\0asm\x0d\x00\x01\x00"),
            Ok(Platform::Wasm)
        );
        let core = Platform::of_bytes(b"\0asm\x01\x00\x00\x00").unwrap_err();
        assert!(core.contains("core WebAssembly module"), "{core}");
        assert!(Platform::of_bytes(b"#!/bin/sh\n").is_err());
        assert!(Platform::of_bytes(b"").is_err());
        for platform in ALL {
            assert_eq!(Platform::parse(platform.as_str()), Some(platform));
        }
    }

    #[test]
    fn this_test_runs_on_a_native_platform() {
        assert!(Platform::native().is_some());
    }
}
