//! Products chosen per shape on a GPU: one table from `(m, k, n, operand type)` to the cubek
//! kernel that runs that product fastest, measured by `s2s bench --product-probe` on a GPU and
//! written here with the GPU and the date it was measured on. A shape outside the table keeps
//! burn's choice (cubek's `SimpleUnit` for f32 on wgpu without autotune).
//!
//! Every product of a `Linear` layer on a GPU reaches [`gpu::product`] (forward and `∂x`;
//! `crate::gemm::small`), and with mixed precision its f16 products too (`half_matmul`). A weight
//! gradient keeps the row split of [`crate::gemm::split_rows`] where that is on.
//!
//! `S2S_GPU_PRODUCTS` tries a choice before it enters the table: entries `MxKxN:TYPE=KERNEL`,
//! comma-separated (`64x512x2048:f16=double-unit`), read once, ahead of the table. A kernel that
//! refuses a shape (a vector-matrix kernel for a matrix, a tensor-core kernel where the driver
//! lists no cooperative matrix) falls back to burn's, once said on stderr.
//!
//! # Shapes
//! - `lhs`: `[m, k]`, `rhs`: `[k, n]` → `[m, n]`

use std::sync::OnceLock;

/// The operands' element type (the output's too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operand {
    /// 32-bit floats.
    F32,
    /// 16-bit floats (mixed precision), accumulated in f32 by the device.
    F16,
}

impl Operand {
    /// `f32` or `f16`.
    pub fn name(self) -> &'static str {
        match self {
            Operand::F32 => "f32",
            Operand::F16 => "f16",
        }
    }
}

/// A kernel the table can choose: burn's own, or one of cubek-matmul's strategies (0.3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// burn's product (today's choice, and every shape outside the table).
    Burn,
    /// One unit (thread) a tile, single-buffered: what burn runs for f32 on wgpu.
    SimpleUnit,
    /// One unit a tile, double-buffered.
    DoubleUnit,
    /// A vector-matrix kernel (one row), inner product per plane.
    SimpleVecMat,
    /// The same, double-buffered.
    DoubleVecMat,
    /// Tensor cores (cooperative matrices; SPIR-V only), cyclic loading.
    SimpleCyclicCmma,
    /// Tensor cores, double-buffered cyclic loading.
    DoubleCyclicCmma,
    /// Tensor cores, double-buffered with ordered loading.
    OrderedDoubleCmma,
}

impl Kernel {
    /// Every kernel, burn's first: what the probe times at each shape.
    pub const ALL: [Kernel; 8] = [
        Kernel::Burn,
        Kernel::SimpleUnit,
        Kernel::DoubleUnit,
        Kernel::SimpleVecMat,
        Kernel::DoubleVecMat,
        Kernel::SimpleCyclicCmma,
        Kernel::DoubleCyclicCmma,
        Kernel::OrderedDoubleCmma,
    ];

    /// Its name in `S2S_GPU_PRODUCTS` and the probe's output (`double-unit`).
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Burn => "burn",
            Kernel::SimpleUnit => "simple-unit",
            Kernel::DoubleUnit => "double-unit",
            Kernel::SimpleVecMat => "simple-vecmat",
            Kernel::DoubleVecMat => "double-vecmat",
            Kernel::SimpleCyclicCmma => "simple-cyclic-cmma",
            Kernel::DoubleCyclicCmma => "double-cyclic-cmma",
            Kernel::OrderedDoubleCmma => "ordered-double-cmma",
        }
    }

    /// The kernel named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// One row of the table: the product `[m, k] × [k, n]` of `operand`s runs `kernel`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// Rows of the left operand.
    pub m: usize,
    /// The summed dimension.
    pub k: usize,
    /// Columns of the right operand.
    pub n: usize,
    /// The operands' type.
    pub operand: Operand,
    /// The kernel chosen.
    pub kernel: Kernel,
}

/// The GPU, driver and date the table was measured on, and the command (empty while no GPU
/// has measured it: every shape then keeps burn's choice).
pub const MEASURED_ON: &str = "";

/// The table: only shapes where a kernel beat burn's in `s2s bench --product-probe` on the GPU
/// of [`MEASURED_ON`]. Empty until a GPU measures it.
pub const TABLE: &[Entry] = &[];

/// The entries of `S2S_GPU_PRODUCTS` (`MxKxN:TYPE=KERNEL`, comma-separated), or what is wrong
/// with the first entry that does not parse.
pub fn parse(spec: &str) -> Result<Vec<Entry>, String> {
    spec.split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(|e| {
            let bad = |why: &str| {
                format!("S2S_GPU_PRODUCTS entry `{e}`: {why} (e.g. `64x512x2048:f16=double-unit`)")
            };
            let (shape, kernel) = e.split_once('=').ok_or_else(|| bad("no `=KERNEL`"))?;
            let (dims, operand) = shape.split_once(':').ok_or_else(|| bad("no `:f32` or `:f16`"))?;
            let dims: Vec<usize> = dims
                .split('x')
                .map(|d| d.trim().parse::<usize>().map_err(|_| bad("the shape is not MxKxN")))
                .collect::<Result<_, _>>()?;
            let [m, k, n] = dims[..] else { return Err(bad("the shape is not MxKxN")) };
            let operand = match operand.trim() {
                "f32" => Operand::F32,
                "f16" => Operand::F16,
                _ => return Err(bad("the type is neither f32 nor f16")),
            };
            let names: Vec<&str> = Kernel::ALL.iter().map(|k| k.name()).collect();
            let kernel = Kernel::parse(kernel.trim())
                .ok_or_else(|| bad(&format!("no kernel of that name; the kernels: {}", names.join(", "))))?;
            Ok(Entry { m, k, n, operand, kernel })
        })
        .collect()
}

/// `S2S_GPU_PRODUCTS`, read once; an entry that does not parse is said once on stderr and the
/// variable ignored.
fn from_env() -> &'static [Entry] {
    static ENTRIES: OnceLock<Vec<Entry>> = OnceLock::new();
    ENTRIES.get_or_init(|| match std::env::var("S2S_GPU_PRODUCTS") {
        Ok(spec) => parse(&spec).unwrap_or_else(|why| {
            eprintln!("warning: {why}; S2S_GPU_PRODUCTS ignored");
            Vec::new()
        }),
        Err(_) => Vec::new(),
    })
}

/// The kernel of the product `[m, k] × [k, n]` of `operand`s in `entries`, then in `table`,
/// else burn's.
pub fn lookup(entries: &[Entry], table: &[Entry], m: usize, k: usize, n: usize, operand: Operand) -> Kernel {
    entries
        .iter()
        .chain(table)
        .find(|e| (e.m, e.k, e.n, e.operand) == (m, k, n, operand))
        .map_or(Kernel::Burn, |e| e.kernel)
}

/// The kernel of the product `[m, k] × [k, n]` of `operand`s: `S2S_GPU_PRODUCTS`, then
/// [`TABLE`], else burn's.
pub fn kernel(m: usize, k: usize, n: usize, operand: Operand) -> Kernel {
    lookup(from_env(), TABLE, m, k, n, operand)
}

/// The product on a cubecl device by the kernel [`kernel`] chooses.
#[cfg(not(feature = "gpu-tuned"))]
pub mod gpu {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use burn::backend::TensorMetadata;
    use burn::backend::ops::FloatTensorOps;
    use burn::tensor::DType;
    use burn_cubecl::CubeBackend;
    use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
    use burn_cubecl::tensor::CubeTensor;
    use cubecl::ir::{ElemType, FloatKind};
    use cubek::matmul::definition::{MatmulElems, MatmulGlobalElems};
    use cubek::matmul::multi_level::Strategy as Ml;
    use cubek::matmul::strategy::Strategy;
    use cubek::std::InputBinding;

    use super::{Kernel, Operand, kernel};

    /// cubek's strategy for `k` (`None` for burn's).
    fn strategy(k: Kernel) -> Option<Strategy> {
        let s = match k {
            Kernel::Burn => return None,
            Kernel::SimpleUnit => Ml::SimpleUnit(Default::default()),
            Kernel::DoubleUnit => Ml::DoubleUnit(Default::default()),
            Kernel::SimpleVecMat => Ml::SimpleVecMat(Default::default()),
            Kernel::DoubleVecMat => Ml::DoubleVecMat(Default::default()),
            Kernel::SimpleCyclicCmma => Ml::SimpleCyclicCmma(Default::default()),
            Kernel::DoubleCyclicCmma => Ml::DoubleCyclicCmma(Default::default()),
            Kernel::OrderedDoubleCmma => Ml::OrderedDoubleCmma(Default::default()),
        };
        Some(Strategy::MultiLevel(s))
    }

    /// Why a table kernel did not run a product (burn's kernel runs it instead).
    #[derive(Debug, thiserror::Error)]
    pub enum Refusal {
        /// The operands are neither f32 nor f16.
        #[error("no table kernel for {0:?} operands")]
        Operands(DType),
        /// cubek refused to launch it (its setup error, as cubek words it).
        #[error("{0}")]
        Launch(String),
    }

    /// `lhs rhs` (`[m, k] × [k, n]`, f32 or f16) by `k`, or why it was refused (burn's
    /// kernel never refuses).
    pub fn product_by(lhs: CubeTensor, rhs: CubeTensor, k: Kernel) -> Result<CubeTensor, Refusal> {
        let Some(strategy) = strategy(k) else { return Ok(CubeBackend::float_matmul(lhs, rhs)) };
        let dtype = lhs.dtype();
        let kind = match dtype {
            DType::F16 => FloatKind::F16,
            DType::F32 => FloatKind::F32,
            other => return Err(Refusal::Operands(other)),
        };
        let (m, n) = (lhs.shape()[0], rhs.shape()[1]);
        let out = empty_device_contiguous_dtype(lhs.client.clone(), lhs.device.clone(), [m, n].into(), dtype);
        let elem = ElemType::Float(kind);
        let mut dtypes = MatmulElems::from_globals(&MatmulGlobalElems { lhs: elem, rhs: elem, out: elem });
        let client = out.client.clone();
        cubek::matmul::launch::launch_ref(
            &strategy,
            &client,
            InputBinding::new(lhs.binding(), elem),
            InputBinding::new(rhs.binding(), elem),
            out.clone().binding(),
            &mut dtypes,
        )
        .map_err(|e| Refusal::Launch(format!("{e:?}")))?;
        Ok(out)
    }

    /// Products a table kernel ran, and those it refused (burn's ran them), since the start.
    static RAN: AtomicUsize = AtomicUsize::new(0);
    static REFUSED: AtomicUsize = AtomicUsize::new(0);

    /// How many products a table kernel has run in this process, and how many it refused.
    pub fn counts() -> (usize, usize) {
        (RAN.load(Ordering::Relaxed), REFUSED.load(Ordering::Relaxed))
    }

    /// `lhs rhs` (`[m, k] × [k, n]`) by the table's kernel for its shape and type; burn's when
    /// the chosen kernel refuses it (tried and said once a shape and type).
    pub fn product(lhs: CubeTensor, rhs: CubeTensor) -> CubeTensor {
        let (m, k, n) = (lhs.shape()[0], lhs.shape()[1], rhs.shape()[1]);
        let operand = if lhs.dtype() == DType::F16 { Operand::F16 } else { Operand::F32 };
        let chosen = kernel(m, k, n, operand);
        if chosen == Kernel::Burn {
            return CubeBackend::float_matmul(lhs, rhs);
        }
        // A shape whose kernel refused it once is not offered to it again (said once, on stderr).
        static REFUSERS: Mutex<Vec<(usize, usize, usize, Operand)>> = Mutex::new(Vec::new());
        let key = (m, k, n, operand);
        let refused_before = REFUSERS.lock().unwrap_or_else(|e| e.into_inner()).contains(&key);
        let result = if refused_before {
            Err(None)
        } else {
            product_by(lhs.clone(), rhs.clone(), chosen).map_err(Some)
        };
        match result {
            Ok(y) => {
                RAN.fetch_add(1, Ordering::Relaxed);
                y
            }
            Err(why) => {
                REFUSED.fetch_add(1, Ordering::Relaxed);
                if let Some(why) = why {
                    REFUSERS.lock().unwrap_or_else(|e| e.into_inner()).push(key);
                    eprintln!(
                        "warning: the product {m}x{k}x{n}:{} refused {} ({why}); burn's kernel runs it",
                        operand.name(),
                        chosen.name()
                    );
                }
                CubeBackend::float_matmul(lhs, rhs)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_parse_and_a_bad_one_says_what_is_wrong() {
        let e = parse("64x512x2048:f16=double-unit, 1x8x8:f32=simple-vecmat").unwrap();
        assert_eq!(e[0], Entry { m: 64, k: 512, n: 2048, operand: Operand::F16, kernel: Kernel::DoubleUnit });
        assert_eq!(e[1].kernel, Kernel::SimpleVecMat);
        assert!(parse("").unwrap().is_empty());
        for (bad, says) in [
            ("64x512:f16=double-unit", "MxKxN"),
            ("64x512x2:f64=double-unit", "neither f32 nor f16"),
            ("64x512x2:f16=fast", "the kernels: burn, simple-unit"),
            ("64x512x2:f16", "no `=KERNEL`"),
        ] {
            let why = parse(bad).unwrap_err();
            assert!(why.contains(says) && why.contains(bad), "{why}");
        }
        for k in Kernel::ALL {
            assert_eq!(Kernel::parse(k.name()), Some(k));
        }
    }

    /// The variable's entries come before the table's; a shape in neither keeps burn's kernel,
    /// and the type is part of the key.
    #[test]
    fn the_variable_comes_first_then_the_table_then_burn() {
        let table = [Entry { m: 4, k: 5, n: 6, operand: Operand::F32, kernel: Kernel::DoubleUnit }];
        let env = [Entry { m: 4, k: 5, n: 6, operand: Operand::F32, kernel: Kernel::SimpleUnit }];
        assert_eq!(lookup(&env, &table, 4, 5, 6, Operand::F32), Kernel::SimpleUnit);
        assert_eq!(lookup(&[], &table, 4, 5, 6, Operand::F32), Kernel::DoubleUnit);
        assert_eq!(lookup(&[], &table, 4, 5, 6, Operand::F16), Kernel::Burn);
        assert_eq!(lookup(&[], &table, 4, 5, 7, Operand::F32), Kernel::Burn);
        assert!(TABLE.is_empty() == MEASURED_ON.is_empty(), "a table says where it was measured");
    }
}
