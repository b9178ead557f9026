//! Whether a later line says a signature's condition cleared (srun's step created after its retries,
//! a pending pod scheduled after all), and for which object.

use super::catalog::Signature;
use crate::model::EvidenceLine;

/// Whether every one of the signature's lines `own` is followed by a line saying its condition
/// cleared. A line about one Kubernetes object is cleared only by a line about the same object (or by
/// one naming none): one pod of a gang being scheduled leaves its pending siblings pending.
pub(super) fn cleared(signature: &Signature, own: &[usize], lines: &[EvidenceLine]) -> bool {
    if !signature.has_resolution() {
        return false;
    }
    let resolving: Vec<(usize, Option<&str>)> = lines
        .iter()
        .enumerate()
        .filter(|(_, line)| signature.resolves(&line.text))
        .map(|(index, line)| (index, object_of(&line.text)))
        .collect();
    !own.is_empty()
        && own.iter().all(|&index| {
            let object = object_of(&lines[index].text);
            resolving.iter().any(|&(at, about)| {
                at > index && (object.is_none() || about.is_none() || object == about)
            })
        })
}

/// The object an API line is about: `pod/train-0` in `kubernetes: Warning FailedScheduling
/// pod/train-0: 0/4 nodes are available...` (the form the Kubernetes backend writes its events in).
fn object_of(text: &str) -> Option<&str> {
    let (_, rest) = text.split_once("kubernetes: ")?;
    let mut words = rest.split_whitespace();
    let (_kind, _reason) = (words.next()?, words.next()?);
    let object = words.next()?.strip_suffix(':')?;
    object.contains('/').then_some(object)
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use super::*;
    use crate::attribute::Catalog;

    fn lines(texts: &[&str]) -> Vec<EvidenceLine> {
        texts
            .iter()
            .map(|text| EvidenceLine {
                time: Utc::now(),
                rank: None,
                text: text.to_string(),
            })
            .collect()
    }

    fn pending(catalog: &Catalog) -> &Signature {
        catalog.signature("sched-k8s-insufficient-gpu").unwrap()
    }

    const FAILED_0: &str = "kubernetes: Warning FailedScheduling pod/train-worker-0: 0/4 nodes are available: 4 Insufficient nvidia.com/gpu.";
    const FAILED_1: &str = "kubernetes: Warning FailedScheduling pod/train-worker-1: 0/4 nodes are available: 4 Insufficient nvidia.com/gpu.";
    const SCHEDULED_0: &str = "kubernetes: Normal Scheduled pod/train-worker-0: Successfully assigned default/train-worker-0 to gpu-3";
    const SCHEDULED_1: &str = "kubernetes: Normal Scheduled pod/train-worker-1: Successfully assigned default/train-worker-1 to gpu-4";

    #[test]
    fn the_object_is_read_from_the_backend_s_event_line_only() {
        assert_eq!(object_of(FAILED_0), Some("pod/train-worker-0"));
        assert_eq!(
            object_of("Warning  FailedScheduling  3m  default-scheduler  0/3 nodes"),
            None
        );
        assert_eq!(object_of("kubernetes: Warning"), None);
    }

    #[test]
    fn a_pod_scheduled_after_all_is_no_longer_pending() {
        let catalog = Catalog::builtin().unwrap();
        let lines = lines(&[FAILED_0, SCHEDULED_0]);
        assert!(cleared(pending(&catalog), &[0], &lines));
        // Before the failure, the scheduling says nothing about it.
        let lines_before = super::tests::lines(&[SCHEDULED_0, FAILED_0]);
        assert!(!cleared(pending(&catalog), &[1], &lines_before));
    }

    #[test]
    fn one_pod_of_a_gang_scheduled_leaves_its_sibling_pending() {
        let catalog = Catalog::builtin().unwrap();
        let lines = lines(&[FAILED_0, FAILED_1, SCHEDULED_0]);
        assert!(!cleared(pending(&catalog), &[0, 1], &lines));
        let both = super::tests::lines(&[FAILED_0, FAILED_1, SCHEDULED_0, SCHEDULED_1]);
        assert!(cleared(pending(&catalog), &[0, 1], &both));
    }

    #[test]
    fn kubectl_describe_rows_name_no_object_and_any_later_row_clears_them() {
        let catalog = Catalog::builtin().unwrap();
        let lines = lines(&[
            "  Warning  FailedScheduling  3m5s  default-scheduler  0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
            "  Normal   Scheduled         88s   default-scheduler  Successfully assigned prod/train-0 to ip-192-168-27-73",
        ]);
        assert!(cleared(pending(&catalog), &[0], &lines));
    }
}
