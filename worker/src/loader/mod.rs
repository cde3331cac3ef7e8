//! The plugin loader: plugin files opened once and checked on their descriptors ([`open`],
//! [`trust`]), structurally checked before `dlopen` ([`elf`] on Linux, [`macho`] on macOS), copied into private storage and
//! loaded through abi_stable with the host's checks of what they declare ([`load`]), and called
//! on the current thread with their answers copied into host data ([`call`]).

pub mod abi;
pub mod call;
pub mod copy;
pub mod elf;
pub mod load;
pub mod macho;
pub mod open;
pub mod trust;

pub use call::{CallInfo, RawAnswer, RawFailure, call_module, parse_outcome, raw_answer_from_ffi};
pub use copy::{CopyDir, PluginFile, sha256_hex};
pub use load::{Loaded, PluginInfo, load_in_process};
