//! Sinusoidal positions (Vaswani et al., 2017, §3.5), computed for any length:
//! `PE(pos, 2i) = sin(pos / 10000^{2i/d})`, `PE(pos, 2i+1) = cos(pos / 10000^{2i/d})`.
//!
//! burn's `PositionalEncoding` precomputes a table and panics past its maximum length; this
//! computes exactly the rows asked for, so a decoder can run as long as its length limit says.
//! On a GPU each window is uploaded once and kept (`s2s_kernels::ops::constant`).

use burn::tensor::{Device, Tensor, TensorData};

/// Positions `start .. start + len` for width `d`.
///
/// # Shapes
/// - returns `[len, d]`
pub fn sinusoids(start: usize, len: usize, d: usize, device: &Device) -> Tensor<2> {
    s2s_kernels::ops::constant("sinusoids", &[start, len, d], device, || table(start, len, d, device))
}

fn table(start: usize, len: usize, d: usize, device: &Device) -> Tensor<2> {
    let mut table = Vec::with_capacity(len * d);
    for pos in start..start + len {
        for j in 0..d {
            let i2 = (j - j % 2) as f64; // 2i
            let angle = pos as f64 / 10000f64.powf(i2 / d as f64);
            table.push(if j % 2 == 0 { angle.sin() } else { angle.cos() } as f32);
        }
    }
    Tensor::from_data(TensorData::new(table, [len, d]), device)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_rows_and_offsets() {
        let d = Device::flex();
        let t: Vec<f32> = sinusoids(0, 2, 4, &d).into_data().try_to_vec::<f32>().unwrap();
        // pos 0: sin 0, cos 0, sin 0, cos 0; pos 1: sin 1, cos 1, sin(1/100), cos(1/100).
        let want = [0.0, 1.0, 0.0, 1.0, 1f32.sin(), 1f32.cos(), 0.01f32.sin(), 0.01f32.cos()];
        assert!(t.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-6), "{t:?}");
        // Row 5000 (past any table burn would have built) equals row 1 of a window that starts there.
        let far: Vec<f32> = sinusoids(4999, 2, 8, &d).into_data().try_to_vec::<f32>().unwrap();
        let one: Vec<f32> = sinusoids(5000, 1, 8, &d).into_data().try_to_vec::<f32>().unwrap();
        assert_eq!(&far[8..], &one[..]);
    }
}
