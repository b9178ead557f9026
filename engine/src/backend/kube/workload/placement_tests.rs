use serde_json::{Value, json};

use super::*;

fn fixture(file: &str) -> Vec<Value> {
    let path = format!(
        "{}/../tests/fixtures/kube/{file}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{path}: {err}"));
    let list: Value = serde_json::from_str(&text).unwrap_or_else(|err| panic!("{path}: {err}"));
    list["items"].as_array().cloned().unwrap_or_default()
}

/// A pod template asking for 8 GPUs, with `spec` merged in.
fn template(extra: Value) -> Value {
    let mut template = json!({"spec": {"containers": [{
        "name": "pytorch", "image": "train:1",
        "resources": {"limits": {"nvidia.com/gpu": 8}, "requests": {"cpu": "90", "memory": "1200Gi"}},
    }]}});
    if let (Some(spec), Some(extra)) = (template["spec"].as_object_mut(), extra.as_object()) {
        for (key, value) in extra {
            spec.insert(key.clone(), value.clone());
        }
    }
    template
}

fn names(capacity: &[String]) -> Vec<&str> {
    capacity.iter().map(String::as_str).collect()
}

const GPU_TOLERATION: &str =
    r#"[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]"#;

#[test]
fn a_tainted_gke_gpu_pool_is_usable_by_a_workload_that_tolerates_the_taint() {
    let nodes = fixture("gke-gpu-pool-nodes.json");
    assert_eq!(nodes.len(), 4);
    let tolerating = Replica::of_template(&template(json!({
        "tolerations": serde_json::from_str::<Value>(GPU_TOLERATION).unwrap_or_default(),
    })));
    let capacity = capacity(std::slice::from_ref(&tolerating), &nodes, None);
    let all = ["gpu-node-1", "gpu-node-2", "gpu-node-3", "gpu-node-4"];
    assert_eq!(names(&capacity.now), all);
    assert_eq!(names(&capacity.fitting), all);

    // Without the toleration no node of the pool takes it, now or ever.
    let intolerant = Replica::of_template(&template(json!({})));
    let capacity = super::capacity(&[intolerant], &nodes, None);
    assert!(capacity.now.is_empty() && capacity.fitting.is_empty());

    // The exact toleration GKE's admission adds (`Equal`, value `present`) works as well.
    let equal = Replica::of_template(&template(json!({"tolerations": [
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}]})));
    assert_eq!(super::capacity(&[equal], &nodes, None).now.len(), 4);
    let wrong_value = Replica::of_template(&template(json!({"tolerations": [
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": "absent"}]})));
    assert!(super::capacity(&[wrong_value], &nodes, None).now.is_empty());
}

#[test]
fn a_not_ready_node_fits_the_workload_but_cannot_take_it_now() {
    let mut nodes = fixture("gke-gpu-pool-nodes.json");
    // gpu-node-3 as the node lifecycle controller leaves it once its kubelet stops posting status.
    for condition in nodes[2]["status"]["conditions"]
        .as_array_mut()
        .into_iter()
        .flatten()
    {
        if condition["type"] == "Ready" {
            condition["status"] = json!("Unknown");
        }
    }
    nodes[2]["spec"]["taints"]
        .as_array_mut()
        .into_iter()
        .for_each(|taints| {
            taints.push(json!({"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}));
        });
    let replica = Replica::of_template(&template(json!({
        "tolerations": serde_json::from_str::<Value>(GPU_TOLERATION).unwrap_or_default(),
    })));
    let capacity = capacity(&[replica], &nodes, None);
    assert_eq!(
        names(&capacity.now),
        ["gpu-node-1", "gpu-node-2", "gpu-node-4"]
    );
    assert_eq!(capacity.fitting.len(), 4, "it comes back");
    assert_eq!(capacity.left(&["gpu-node-3".to_string()]), (3, 3));
}

#[test]
fn mixed_pools_count_by_taint_label_and_allocatable_gpus() {
    let nodes = fixture("gpu-pools-mixed-nodes.json");
    let eks = Replica::of_template(&template(json!({
        "tolerations": serde_json::from_str::<Value>(GPU_TOLERATION).unwrap_or_default(),
        "nodeSelector": {"eks.amazonaws.com/nodegroup": "p5-training"},
    })));
    let capacity = capacity(&[eks], &nodes, None);
    // -17 ready; -18 cordoned and -19 unreachable come back; -20 is being removed by the autoscaler.
    assert_eq!(names(&capacity.now), ["ip-10-0-41-17.ec2.internal"]);
    assert_eq!(
        names(&capacity.fitting),
        [
            "ip-10-0-41-17.ec2.internal",
            "ip-10-0-41-18.ec2.internal",
            "ip-10-0-41-19.ec2.internal"
        ]
    );

    // Tolerating everything still needs 8 allocatable GPUs: not the 4-GPU inference node, not the
    // CPU node, and AKS's `sku=gpu` pool is in.
    let anywhere =
        Replica::of_template(&template(json!({"tolerations": [{"operator": "Exists"}]})));
    let capacity = super::capacity(&[anywhere], &nodes, None);
    assert_eq!(
        names(&capacity.now),
        [
            "aks-gpupool-18392011-vmss000000",
            "ip-10-0-41-17.ec2.internal",
            "ip-10-0-41-20.ec2.internal"
        ]
    );

    // AKS's taint, by required affinity on the agent pool label.
    let aks = Replica::of_template(&template(json!({
        "tolerations": [{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.azure.com/agentpool", "operator": "In", "values": ["gpupool"]}]}
        ]}}},
    })));
    assert_eq!(
        names(&super::capacity(&[aks], &nodes, None).now),
        ["aks-gpupool-18392011-vmss000000"]
    );

    // A dedicated taint is a property of the pool: a workload without its toleration never fits there.
    let small = Replica::of_template(&json!({"spec": {
        "tolerations": serde_json::from_str::<Value>(GPU_TOLERATION).unwrap_or_default(),
        "containers": [{"name": "infer", "resources": {"limits": {"nvidia.com/gpu": 1}}}],
    }}));
    let capacity = super::capacity(&[small], &nodes, None);
    assert!(
        !capacity
            .fitting
            .iter()
            .any(|n| n == "ip-10-0-52-3.ec2.internal")
    );
    assert!(
        !capacity
            .fitting
            .iter()
            .any(|n| n == "ip-10-0-8-201.ec2.internal")
    );
}

#[test]
fn affinity_terms_are_ored_and_their_expressions_anded() {
    let nodes = fixture("gke-gpu-pool-nodes.json");
    let replica = |terms: Value| {
        Replica::of_template(&template(json!({
            "tolerations": serde_json::from_str::<Value>(GPU_TOLERATION).unwrap_or_default(),
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}},
        })))
    };
    let exclusion = replica(json!([{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["gpu-node-3"]},
        {"key": "cloud.google.com/gke-accelerator", "operator": "Exists"},
    ]}]));
    assert_eq!(
        names(&capacity(&[exclusion], &nodes, None).now),
        ["gpu-node-1", "gpu-node-2", "gpu-node-4"]
    );
    let either = replica(json!([
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-node-1"]}]},
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["gpu-node-4"]}]},
    ]));
    assert_eq!(
        names(&capacity(&[either], &nodes, None).now),
        ["gpu-node-1", "gpu-node-4"]
    );
    let count = replica(json!([{"matchExpressions": [
        {"key": "cloud.google.com/gke-accelerator-count", "operator": "Gt", "values": ["4"]}]}]));
    assert_eq!(capacity(&[count], &nodes, None).now.len(), 4);
    let empty_term = replica(json!([{}]));
    assert!(capacity(&[empty_term], &nodes, None).fitting.is_empty());
}

#[test]
fn pod_requests_sum_containers_and_take_the_largest_init_container() {
    let replica = Replica::of_template(&json!({"spec": {
        "initContainers": [{"name": "fetch", "resources": {"requests": {"cpu": "200", "memory": "1Gi"}}}],
        "containers": [
            {"name": "a", "resources": {"limits": {"nvidia.com/gpu": "4", "cpu": "8"}, "requests": {"cpu": "6"}}},
            {"name": "b", "resources": {"limits": {"nvidia.com/gpu": "4"}, "requests": {"memory": "500Mi"}}},
        ],
    }}));
    assert_eq!(replica.requests["nvidia.com/gpu"], 8.0);
    assert_eq!(
        replica.requests["cpu"], 200.0,
        "the init container asks for more"
    );
    assert_eq!(replica.requests["memory"], 1_073_741_824.0);
    let nodes = fixture("gke-gpu-pool-nodes.json");
    // 200 CPUs fit on 207 allocatable, but no toleration: fits nowhere.
    assert!(capacity(&[replica], &nodes, None).fitting.is_empty());
}

#[test]
fn quantities_read_as_the_api_writes_them() {
    for (text, value) in [
        ("8", 8.0),
        ("191450m", 191.45),
        ("2010398012Ki", 2_010_398_012.0 * 1024.0),
        ("1.5Gi", 1.5 * 1_073_741_824.0),
        ("1e3", 1000.0),
        ("2k", 2000.0),
    ] {
        let read = quantity_of(&json!(text)).unwrap_or(f64::NAN);
        assert!((read - value).abs() <= value * 1e-12, "{text}: {read}");
    }
    assert_eq!(quantity_of(&json!(4)), Some(4.0));
    assert_eq!(quantity_of(&json!("lots")), None);
    assert_eq!(quantity_of(&json!("Gi")), None);
}

#[test]
fn an_elastic_pytorchjob_says_its_minimum() {
    let job = json!({"spec": {"elasticPolicy": {"minReplicas": 2, "maxReplicas": 4}}});
    assert_eq!(elastic_min(WorkloadKind::PyTorchJob, &job), Some(2));
    assert_eq!(
        elastic_min(WorkloadKind::PyTorchJob, &json!({"spec": {}})),
        None
    );
}
