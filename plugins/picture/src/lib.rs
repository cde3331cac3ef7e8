//! `picture`: draws images for the model. Its tool `checkerboard` answers with a real PNG.

use rho_plugin_api::{Answer, Ctx, JsonSchema, Tool, ToolError, export_plugin};
use serde::Deserialize;

/// The largest board side, in pixels.
pub const MAX_SIZE: u32 = 4096;
/// The side of one square, in pixels.
pub const SQUARE: u32 = 8;

/// Arguments of `checkerboard`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct CheckerboardArgs {
    /// The side of the square image, in pixels (1 to 4096).
    #[schemars(range(min = 1, max = 4096))]
    pub size: u32,
}

/// Draws a black and white checkerboard of `size` x `size` pixels (squares of 8 pixels) as a PNG.
pub fn checkerboard(args: CheckerboardArgs, _ctx: &Ctx) -> Result<Answer, ToolError> {
    let size = args.size;
    if size == 0 || size > MAX_SIZE {
        return Err(ToolError::new(format!(
            "size must be between 1 and {MAX_SIZE} pixels, not {size}"
        )));
    }
    let png = encode(size)?;
    let squares = size.div_ceil(SQUARE);
    let text = format!(
        "A {size}x{size} pixel black and white checkerboard of {squares}x{squares} squares of {SQUARE} pixels, top-left square black, as a {} byte PNG.",
        png.len()
    );
    Ok(Answer::image("image/png", png, text))
}

fn encode(size: u32) -> Result<Vec<u8>, ToolError> {
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, size, size);
    encoder.set_color(png::ColorType::Grayscale);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header()?;
    let pixels: Vec<u8> = (0..size)
        .flat_map(|y| {
            (0..size).map(move |x| {
                if (x / SQUARE + y / SQUARE).is_multiple_of(2) {
                    0
                } else {
                    255
                }
            })
        })
        .collect();
    writer.write_image_data(&pixels)?;
    writer.finish()?;
    Ok(out)
}

export_plugin! {
    Tool::new(
        "checkerboard",
        "Draws a black and white checkerboard PNG of the given size, for the model to look at.",
        checkerboard,
    ),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_a_png() {
        let answer = checkerboard(CheckerboardArgs { size: 16 }, &Ctx::detached("t")).unwrap();
        let image = &answer.output.images()[0];
        assert_eq!(image.mime_type, "image/png");
        assert_eq!(&image.bytes[..8], b"\x89PNG\r\n\x1a\n");
        assert!(checkerboard(CheckerboardArgs { size: 0 }, &Ctx::detached("t")).is_err());
    }
}
