//! The CPU's time-major steps (see the module doc of [`crate::steps`]).

use burn::backend::Flex;
use burn::backend::autodiff::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::flex::FlexTensor;
use burn::backend::tensor::FloatTensor;
use burn::tensor::{DType, Shape, TensorData};

use crate::cpu::flex_data::f32s;

impl super::TimeMajor for Flex {
    type Buffer = Vec<f32>;

    fn time_major(x: FlexTensor) -> FlexTensor {
        assert!(
            x.dtype() == DType::F32 && x.layout().shape().num_dims() == 3,
            "time steps: x is not f32 [batch, time, d]"
        );
        x.transpose(0, 1).to_contiguous()
    }

    fn step(tm: &FlexTensor, t: usize) -> FlexTensor {
        let s = tm.layout().shape();
        let (batch, d) = (s[1], s[2]);
        tm.narrow(0, t, 1).reshape(Shape::from([batch, d]))
    }

    fn zeroed(shape: [usize; 3], _: &FlexTensor) -> (Vec<f32>, FlexTensor) {
        (vec![0.0; shape.iter().product()], FlexTensor::zeros(Shape::from(shape), DType::F32))
    }

    fn write(buffer: &mut Vec<f32>, t: usize, grad: FlexTensor, shape: [usize; 3]) {
        let n = shape[1] * shape[2];
        let grad = f32s(&grad);
        assert_eq!(grad.len(), n, "time steps: a step's gradient is not [batch, d]");
        buffer[t * n..(t + 1) * n].copy_from_slice(&grad);
    }

    fn finish(buffer: Vec<f32>, shape: [usize; 3]) -> FlexTensor {
        FlexTensor::from_data(TensorData::new(buffer, shape))
    }
}

impl super::TimeSteps for Flex {
    fn time_steps(x: FlexTensor) -> Vec<FlexTensor> {
        super::plain_time_steps::<Self>(x)
    }
}

impl<C: CheckpointStrategy> super::TimeSteps for Autodiff<Flex, C> {
    fn time_steps(x: FloatTensor<Self>) -> Vec<FloatTensor<Self>> {
        super::autodiff_time_steps::<Flex, C>(x)
    }
}
