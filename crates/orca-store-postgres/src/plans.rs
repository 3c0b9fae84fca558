//! [`PlanStore`] on PostgreSQL.

use std::collections::HashMap;

use async_trait::async_trait;
use orca_core::{Plan, PlanId};
use orca_store::common;
use orca_store::{
    Listing, ListingProblem, PlanStore, PlanSummary, Revision, StoreError, Versioned,
};

use crate::codec::{self, db_revision, decode, encode};
use crate::{PgStore, db};

#[async_trait]
impl PlanStore for PgStore {
    async fn create_plan(&self, plan: &Plan) -> Result<Revision, StoreError> {
        let what = common::plan_what(plan);
        let doc = encode(plan, &what)?;
        let conn = self.conn().await?;
        let n = conn
            .execute(
                "INSERT INTO plans (id, revision, doc) VALUES ($1, 1, $2) ON CONFLICT DO NOTHING",
                &[&plan.id().to_string(), &doc],
            )
            .await
            .map_err(db(format!("storing {what}")))?;
        if n == 0 {
            return Err(StoreError::AlreadyExists { what });
        }
        Ok(Revision::FIRST)
    }

    async fn plan(&self, id: PlanId) -> Result<Versioned<Plan>, StoreError> {
        let key = id.to_string();
        let conn = self.conn().await?;
        let row = conn
            .query_opt("SELECT revision, doc FROM plans WHERE id = $1", &[&key])
            .await
            .map_err(db(format!("reading plan {id}")))?
            .ok_or_else(|| StoreError::NotFound {
                what: format!("plan {id}"),
            })?;
        decode("plans", &key, row.get(1), row.get(0), Plan::from_json)
    }

    async fn update_plan(&self, plan: &Plan, expected: Revision) -> Result<Revision, StoreError> {
        let what = common::plan_what(plan);
        let key = plan.id().to_string();
        let doc = encode(plan, &what)?;
        let mut conn = self.conn().await?;
        let tx = conn
            .transaction()
            .await
            .map_err(db(format!("updating {what}")))?;
        let (stored, next) =
            codec::locked_at(&tx, "plans", &key, &what, expected, Plan::from_json).await?;
        common::check_plan_update(&stored.value, plan)?;
        tx.execute(
            "UPDATE plans SET revision = $2, doc = $3 WHERE id = $1",
            &[&key, &db_revision(next), &doc],
        )
        .await
        .map_err(db(format!("writing {what}")))?;
        tx.commit()
            .await
            .map_err(db(format!("committing {what}")))?;
        Ok(next)
    }

    async fn list_plans(&self) -> Result<Listing<PlanSummary>, StoreError> {
        let conn = self.conn().await?;
        let counts: HashMap<String, i64> = conn
            .query(
                "SELECT plan_id, count(*) FROM executions GROUP BY plan_id",
                &[],
            )
            .await
            .map_err(db("counting executions"))?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        let rows = conn
            .query("SELECT id, revision, doc FROM plans", &[])
            .await
            .map_err(db("listing plans"))?;
        let mut items = Vec::with_capacity(rows.len());
        let mut problems = Vec::new();
        for row in &rows {
            let key: String = row.get(0);
            match decode("plans", &key, row.get(2), row.get(1), Plan::from_json) {
                Ok(p) => {
                    let n = counts.get(&key).copied().unwrap_or(0);
                    items.push(common::plan_summary(
                        &p.value,
                        usize::try_from(n).unwrap_or(0),
                    ));
                }
                Err(e) => problems.push(ListingProblem {
                    location: codec::location("plans", &key).display().to_string(),
                    message: e.to_string(),
                }),
            }
        }
        common::sort_plans(&mut items);
        Ok(Listing { items, problems })
    }
}
