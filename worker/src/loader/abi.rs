//! What crosses the plugin ABI, read as the host reads it: strings checked for UTF-8, and the
//! interface a module may be asked for.

use abi_stable::std_types::RString;
use rho_plugin_api::ffi::PluginModRef;

/// A plugin's string as host data, refused unless it is UTF-8: abi_stable's `RString` takes its
/// maker's word for it, and text that is not UTF-8 must never reach a client.
pub fn plain_text(s: RString) -> Option<String> {
    String::from_utf8(s.into_bytes().into_vec()).ok()
}

/// Whether the host may use the fields interface `version` added to `module`: only a module that
/// reports that interface or a later one, which `open_module` (in `load.rs`) let through only
/// after checking the layout of the interface it reports.
pub fn uses_interface(module: PluginModRef, version: u32) -> bool {
    module.interface_version() >= version
}
