"""The networks: HyperQA/CosineQA (bag of words, ball maps), QA-CNN/QA-biLSTM, RDE/HRDE and
AP-CNN/AP-biLSTM as torch modules, and the families that build each model kind."""
