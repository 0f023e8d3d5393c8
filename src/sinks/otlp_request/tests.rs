use super::*;
use crate::sinks::test_events;

#[test]
fn a_log_record_with_shared_attributes_encodes_as_prost_would_join_them() {
    let envs = test_events::mixed();
    for env in &envs {
        let Some(Record::Log(l)) = &env.record else {
            continue;
        };
        for split in 0..=l.attributes.len() {
            let (shared, own) = l.attributes.split_at(split);
            let mut part = l.clone();
            part.attributes = own.to_vec();
            let mut buf = Vec::new();
            encode_log(&part, shared, &mut buf);
            assert_eq!(buf, l.encode_to_vec());
            assert_eq!(log_len(&part, shared), buf.len());
        }
    }
}
